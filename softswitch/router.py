"""One gRPC server per softswitch process, however many switches it serves.

P4Runtime names the device in every request (`device_id`; a stream names it in its first
arbitration update), so one server can serve many devices, each with its own arbitration,
pipeline and limits (softswitch.server.P4RuntimeService). A process of 136 switches used to
run 136 grpc.Server objects; each polls its completion queue every 200 ms even when idle,
which made idle switches cost CPU (0.2 ms per second per server, measured). The Router keeps
one server, bound to every switch's loopback port, and hands each request to the switch its
device id names (docs/decisions.md, "Many software switches per process").

A switch that crashed (softswitch.__main__.Process.detach) stays known but down: its requests
get UNAVAILABLE, as a connection to a dead target would, until it is attached again.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent import futures
from importlib.metadata import version

import grpc
from p4.v1 import p4runtime_pb2

from softswitch import limits
from softswitch.errors import P4RTError
from softswitch.server import Device, P4RuntimeService


class Router:
    """The servicer of a process: each RPC goes to the service of the device it names."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.services: dict[int, P4RuntimeService] = {}
        self.down: set[int] = set()
        self.stats = {"p4rt_undecodable": 0, "p4rt_streams_refused": 0}
        self.unassigned = 0  # streams that have not yet named their device
        self.max_unassigned = limits.MAX_STREAMS  # per switch served (serve_router)

    def add(self, service: P4RuntimeService) -> None:
        with self.lock:
            self.services[service.device.device_id] = service
            self.down.discard(service.device.device_id)

    def take_down(self, device_id: int) -> None:
        """The switch crashed: its streams end with UNAVAILABLE, later requests get it too."""
        with self.lock:
            service = self.services.pop(device_id)
            self.down.add(device_id)
        service.close(f"switch {device_id} is down")

    def count(self, what: str) -> None:
        with self.lock:
            self.stats[what] += 1

    def _service(self, device_id: int, context: grpc.ServicerContext) -> P4RuntimeService:
        with self.lock:
            service = self.services.get(device_id)
            down = device_id in self.down
            known = sorted(self.services.keys() | self.down)
        if service is None:
            if down:
                context.abort(grpc.StatusCode.UNAVAILABLE,
                              f"switch {device_id} is down (crashed; a reboot brings it back)")
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"device id {device_id} unknown (this server serves {_ids(known)})")
        return service

    # ---- RPCs: the device's service answers ------------------------------------------

    def Write(self, request, context):  # noqa: N802 (gRPC's method names)
        return self._service(request.device_id, context).Write(request, context)

    def Read(self, request, context):  # noqa: N802
        return self._service(request.device_id, context).Read(request, context)

    def SetForwardingPipelineConfig(self, request, context):  # noqa: N802
        return self._service(request.device_id, context).SetForwardingPipelineConfig(
            request, context)

    def GetForwardingPipelineConfig(self, request, context):  # noqa: N802
        return self._service(request.device_id, context).GetForwardingPipelineConfig(
            request, context)

    def Capabilities(self, request, context):  # noqa: N802 (no device in the request)
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=version("p4runtime"))

    def StreamChannel(self, request_iterator, context) -> Iterator:  # noqa: N802
        """Wait for the first message (it names the device), then hand the stream over.
        Streams still waiting are capped at MAX_STREAMS per switch served (a controller
        connects to every switch at once), so idle connections cannot take the workers the
        unary RPCs need."""
        with self.lock:
            refused = self.unassigned >= self.max_unassigned
            if refused:
                self.stats["p4rt_streams_refused"] += 1
            else:
                self.unassigned += 1
        if refused:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"this server holds at most {self.max_unassigned} StreamChannel clients "
                          "that have not sent their arbitration update: close an idle one")
        try:
            first = next(request_iterator, None)
        finally:
            with self.lock:
                self.unassigned -= 1
        if first is None:
            return
        try:
            req = limits.decode(p4runtime_pb2.StreamMessageRequest, first)
        except P4RTError as err:
            self.count("p4rt_undecodable")
            context.abort(err.code, err.message)
        if req.WhichOneof("update") != "arbitration":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          "the first stream message must be an arbitration update")
        service = self._service(req.arbitration.device_id, context)
        yield from service.StreamChannel(itertools.chain([first], request_iterator), context)


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids)) if len(ids) <= 8 else f"{ids[0]}..{ids[-1]} ({len(ids)})"


def serve_router(router: Router, addresses: list[str], switches: int,
                 credentials: grpc.ServerCredentials | None = None) -> grpc.Server:
    """Start one gRPC server on every loopback address (validated by the caller), over TLS
    when `credentials` are given (p4rt.tls.server_credentials).

    Streams hold a worker thread each for their lifetime: the pool has room for MAX_STREAMS
    per switch that named it and as many still unassigned, plus UNARY_WORKERS only unary RPCs
    can use. Threads start as needed, so the size costs nothing until it is used."""
    router.max_unassigned = switches * limits.MAX_STREAMS
    pool = futures.ThreadPoolExecutor(
        max_workers=2 * switches * limits.MAX_STREAMS + limits.UNARY_WORKERS)
    server = grpc.server(pool, maximum_concurrent_rpcs=switches * limits.MAX_CONCURRENT_RPCS,
                         options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((limits.generic_handler(router, router.count),))
    for address in addresses:
        try:
            bound = server.add_secure_port(address, credentials) if credentials is not None \
                else server.add_insecure_port(address)
        except RuntimeError as err:  # grpcio >= 1.5x raises instead of returning 0
            raise OSError(f"cannot bind the P4Runtime server to {address}: is the port in "
                          f"use? ({err})") from err
        if bound == 0:
            raise OSError(f"cannot bind the P4Runtime server to {address}: is the port in use?")
    server.start()
    return server


def serve(device: Device, address: str,
          credentials: grpc.ServerCredentials | None = None) -> grpc.Server:
    """One switch's P4Runtime server (a process of one switch, and the tests)."""
    router = Router()
    router.add(P4RuntimeService(device))
    return serve_router(router, [address], 1, credentials)
