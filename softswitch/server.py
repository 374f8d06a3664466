"""P4Runtime gRPC service: arbitration, pipeline config, Write/Read, Capabilities.

Behaves like a real target as seen by p4runtime-shell and the controller: the client
with the highest election id is primary and alone may Write or set the pipeline;
batch failures come back as gRPC UNKNOWN with one p4.v1.Error per update in the
google.rpc.Status details. softswitch.limits says what it refuses to grow beyond;
softswitch.router serves the devices of a process from one gRPC server.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4rt.p4info import COMMITTED_P4INFO, P4InfoIndex, PipelineMismatch, check_compatible
from p4rt.p4info import load_text as load_p4info
from softswitch import limits
from softswitch.errors import P4RTError
from softswitch.reader import read_entity
from softswitch.store import DeviceState

log = logging.getLogger("softswitch.p4rt")

SetReq = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetReq = p4runtime_pb2.GetForwardingPipelineConfigRequest


def _eid(u: p4runtime_pb2.Uint128) -> int:
    return u.high << 64 | u.low


class Device:
    """Pipeline config and state of one switch; `on_commit` hands new state to the data plane."""

    def __init__(self, device_id: int, on_commit: Callable[[DeviceState], None],
                 stats: dict[str, int] | None = None) -> None:
        self.device_id = device_id
        self.on_commit = on_commit
        self.stats = stats if stats is not None else {}  # the data plane's, for `stats`
        for key in ("p4rt_undecodable", "p4rt_streams_refused"):
            self.stats.setdefault(key, 0)
        self.config: p4runtime_pb2.ForwardingPipelineConfig | None = None
        self.saved: p4runtime_pb2.ForwardingPipelineConfig | None = None
        self.state: DeviceState | None = None
        self._reference: P4InfoIndex | None = None

    def verify(self, config: p4runtime_pb2.ForwardingPipelineConfig) -> P4InfoIndex:
        if self._reference is None:
            self._reference = P4InfoIndex.build(load_p4info(COMMITTED_P4INFO))
        index = P4InfoIndex.build(config.p4info)
        try:
            check_compatible(index, self._reference)
        except PipelineMismatch as err:
            raise P4RTError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
        return index

    def commit(self, config: p4runtime_pb2.ForwardingPipelineConfig) -> None:
        index = self.verify(config)
        state = DeviceState(index)
        self.on_commit(state)
        self.config, self.state = config, state


class _Arbiter:
    """Election-id bookkeeping for the default role."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.streams: dict[int, tuple[int | None, queue.Queue]] = {}

    def primary(self) -> tuple[int | None, int | None]:
        """(stream token, election id) of the primary, or (None, None)."""
        best = max(((eid, tok) for tok, (eid, _) in self.streams.items() if eid is not None),
                   default=None)
        return (best[1], best[0]) if best else (None, None)

    def notify(self, device_id: int, only: int | None = None) -> None:
        """Tell every client (or just `only`) who is primary now."""
        token, eid = self.primary()
        for tok, (_, out) in self.streams.items():
            if only is not None and tok != only:
                continue
            msg = p4runtime_pb2.StreamMessageResponse()
            msg.arbitration.device_id = device_id
            if eid is not None:
                msg.arbitration.election_id.high, msg.arbitration.election_id.low = (
                    eid >> 64, eid & (2**64 - 1))
            if tok == token:
                msg.arbitration.status.code = code_pb2.OK
                msg.arbitration.status.message = "primary"
            elif token is not None:
                msg.arbitration.status.code = code_pb2.ALREADY_EXISTS
                msg.arbitration.status.message = "a primary is connected; this client is a backup"
            else:
                msg.arbitration.status.code = code_pb2.NOT_FOUND
                msg.arbitration.status.message = "no primary is connected"
            out.put(msg)


class P4RuntimeService(p4runtime_pb2_grpc.P4RuntimeServicer):
    """One switch's P4Runtime RPCs. softswitch.router picks the service by the request's
    device_id and answers Capabilities (it names no device) itself."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.arbiter = _Arbiter()
        self._next_token = 0
        self._open_streams = 0
        self.config_lock = threading.Lock()

    def count(self, what: str) -> None:
        self.device.stats[what] += 1

    def close(self, reason: str) -> None:
        """The switch went down: every open stream ends with UNAVAILABLE and `reason`."""
        with self.arbiter.lock:
            outs = [out for _, out in self.arbiter.streams.values()]
            self.arbiter.streams.clear()
        for out in outs:
            out.put(P4RTError(grpc.StatusCode.UNAVAILABLE, reason))

    # ---- helpers -------------------------------------------------------------------

    def _check_primary(self, req, context: grpc.ServicerContext) -> None:
        if req.role:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "only the default role is supported")
        with self.arbiter.lock:
            _, eid = self.arbiter.primary()
        if eid is None or _eid(req.election_id) != eid:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          "only the primary client (highest election id on an open stream) "
                          "may do this")

    def _state(self, context: grpc.ServicerContext) -> DeviceState:
        if self.device.state is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          "no forwarding pipeline config set")
        return self.device.state

    # ---- RPCs ----------------------------------------------------------------------

    def Write(self, request, context):
        self._check_primary(request, context)
        state = self._state(context)
        if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity")
        try:
            limits.check_batch(len(request.updates))
        except P4RTError as err:
            context.abort(err.code, err.message)
        results = state.write(list(request.updates))
        if all(r is None for r in results):
            return p4runtime_pb2.WriteResponse()
        status = limits.batch_status(results)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(grpc.StatusCode.UNKNOWN, status.message)

    def Read(self, request, context):
        state = self._state(context)
        response = p4runtime_pb2.ReadResponse()
        try:
            for entity in request.entities:
                response.entities.extend(read_entity(state, entity))
        except P4RTError as err:
            context.abort(err.code, err.message)
        yield response

    def SetForwardingPipelineConfig(self, request, context):
        self._check_primary(request, context)
        action = request.action
        with self.config_lock:
            try:
                if action == SetReq.VERIFY:
                    self.device.verify(request.config)
                elif action == SetReq.VERIFY_AND_SAVE:
                    self.device.verify(request.config)
                    self.device.saved = request.config
                elif action == SetReq.VERIFY_AND_COMMIT:
                    self.device.commit(request.config)
                elif action == SetReq.COMMIT:
                    if self.device.saved is None:
                        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                      "COMMIT without a config saved by VERIFY_AND_SAVE")
                    self.device.commit(self.device.saved)
                    self.device.saved = None
                elif action == SetReq.RECONCILE_AND_COMMIT:
                    self._reconcile(request.config, context)
                else:
                    context.abort(grpc.StatusCode.UNIMPLEMENTED,
                                  f"pipeline config action {SetReq.Action.Name(action)}")
            except P4RTError as err:
                context.abort(err.code, err.message)
        log.info("pipeline config action %s done", SetReq.Action.Name(action))
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _reconcile(self, config, context) -> None:
        """Keep the forwarding state when the P4Info is unchanged (a controller restart)."""
        current = self.device.config
        if current is None:
            self.device.commit(config)
        elif current.p4info == config.p4info:
            self.device.config = config
        else:
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          "RECONCILE_AND_COMMIT with a different P4Info: use VERIFY_AND_COMMIT")

    def GetForwardingPipelineConfig(self, request, context):
        config = self.device.config
        if config is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config set")
        out = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        out.config.cookie.CopyFrom(config.cookie)
        if request.response_type in (GetReq.ALL, GetReq.P4INFO_AND_COOKIE):
            out.config.p4info.CopyFrom(config.p4info)
        if request.response_type in (GetReq.ALL, GetReq.DEVICE_CONFIG_AND_COOKIE):
            out.config.p4_device_config = config.p4_device_config
        return out

    def StreamChannel(self, request_iterator, context) -> Iterator:
        """`request_iterator` yields raw bytes (softswitch.limits); the reader decodes them."""
        with self.arbiter.lock:
            if self._open_streams >= limits.MAX_STREAMS:
                refused = True
            else:
                refused = False
                self._open_streams += 1
                self._next_token += 1
                token = self._next_token
        if refused:
            self.count("p4rt_streams_refused")
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"this switch serves at most {limits.MAX_STREAMS} StreamChannel "
                          "clients at once: close an idle one")
        try:
            yield from self._stream_replies(token, request_iterator, context)
        finally:
            with self.arbiter.lock:
                self._open_streams -= 1

    def _stream_replies(self, token: int, request_iterator, context) -> Iterator:
        out: queue.Queue = queue.Queue()
        context.add_callback(lambda: out.put(None))  # RPC ended (cancel, server stop)
        reader = threading.Thread(target=self._stream_reader, daemon=True,
                                  args=(token, request_iterator, out))
        reader.start()
        while True:
            msg = out.get()
            if msg is None:
                return
            if isinstance(msg, P4RTError):
                context.abort(msg.code, msg.message)
            yield msg

    def _stream_reader(self, token: int, requests, out: queue.Queue) -> None:
        try:
            for raw in requests:
                try:
                    req = limits.decode(p4runtime_pb2.StreamMessageRequest, raw)
                except P4RTError as err:
                    self.count("p4rt_undecodable")
                    out.put(err)
                    return
                err = self._on_stream_message(token, req, out)
                if err is not None:
                    out.put(err)
                    return
        except grpc.RpcError:
            log.debug("stream %d closed by the client", token)
        finally:
            with self.arbiter.lock:
                was = self.arbiter.primary()[0]
                self.arbiter.streams.pop(token, None)
                if was == token:
                    self.arbiter.notify(self.device.device_id)
            out.put(None)

    def _on_stream_message(self, token: int, req, out: queue.Queue) -> P4RTError | None:
        kind = req.WhichOneof("update")
        if kind != "arbitration":
            if token not in self.arbiter.streams:
                return P4RTError(grpc.StatusCode.FAILED_PRECONDITION,
                                 "the first stream message must be an arbitration update")
            reply = p4runtime_pb2.StreamMessageResponse()
            reply.error.canonical_code = code_pb2.UNIMPLEMENTED
            reply.error.message = f"stream message {kind} is not supported by this program"
            out.put(reply)
            return None
        arb = req.arbitration
        if arb.device_id != self.device.device_id:
            return P4RTError(grpc.StatusCode.NOT_FOUND, f"device id {arb.device_id} unknown")
        if arb.role.name:
            return P4RTError(grpc.StatusCode.UNIMPLEMENTED, "only the default role is supported")
        eid = _eid(arb.election_id) if arb.HasField("election_id") else None
        with self.arbiter.lock:
            if eid is not None and any(e == eid for tok, (e, _) in self.arbiter.streams.items()
                                       if tok != token):
                return P4RTError(grpc.StatusCode.INVALID_ARGUMENT,
                                 f"election id {eid} is already used by another client")
            before = self.arbiter.primary()
            self.arbiter.streams[token] = (eid, out)
            changed = self.arbiter.primary() != before
            self.arbiter.notify(self.device.device_id, None if changed else token)
        return None
