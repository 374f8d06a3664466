"""What the P4Runtime server refuses to grow beyond, and how it says so.

A software switch is as exposed to a misbehaving controller as a real target, so it keeps the
same promises: every request is decoded by us (a request grpcio cannot decode leaks its call
in grpcio 1.85's sync server, about 20 KB each; decoding raw bytes ourselves avoids that path
and gives INVALID_ARGUMENT with the reason), StreamChannel clients are capped so they cannot
take every worker thread from Write and Read, and a failed batch's per-update status always
fits in gRPC's metadata limit (the client drops trailing metadata above 16 KiB and may above
8 KiB, leaving a bare RESOURCE_EXHAUSTED).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2

from softswitch.errors import P4RTError

MAX_STREAMS = 8  # concurrent StreamChannel RPCs (one primary and backups)
UNARY_WORKERS = 8  # threads left for Write/Read/SetPipeline/Capabilities when streams are full
MAX_CONCURRENT_RPCS = 64  # beyond this, grpcio answers RESOURCE_EXHAUSTED at once
MAX_UPDATES_PER_WRITE = 128  # so one Error per update fits STATUS_BUDGET even without messages
STATUS_BUDGET = 7 * 1024  # bytes of grpc-status-details-bin, under the client's 8 KiB soft limit
MAX_ERROR_MESSAGE = 160  # characters of one update's error message

SERVICE = "p4.v1.P4Runtime"
# method -> (arity, request class, response class); arity as grpc's *_rpc_method_handler names
METHODS: dict[str, tuple[str, type, type]] = {
    "Write": ("unary_unary", p4runtime_pb2.WriteRequest, p4runtime_pb2.WriteResponse),
    "Read": ("unary_stream", p4runtime_pb2.ReadRequest, p4runtime_pb2.ReadResponse),
    "SetForwardingPipelineConfig": (
        "unary_unary", p4runtime_pb2.SetForwardingPipelineConfigRequest,
        p4runtime_pb2.SetForwardingPipelineConfigResponse),
    "GetForwardingPipelineConfig": (
        "unary_unary", p4runtime_pb2.GetForwardingPipelineConfigRequest,
        p4runtime_pb2.GetForwardingPipelineConfigResponse),
    "StreamChannel": ("stream_stream", p4runtime_pb2.StreamMessageRequest,
                      p4runtime_pb2.StreamMessageResponse),
    "Capabilities": ("unary_unary", p4runtime_pb2.CapabilitiesRequest,
                     p4runtime_pb2.CapabilitiesResponse),
}


def decode(cls: type, raw: bytes) -> Any:
    """Parse a request ourselves; P4RTError(INVALID_ARGUMENT) when the bytes are not one."""
    try:
        return cls.FromString(raw)
    except DecodeError as err:
        raise P4RTError(grpc.StatusCode.INVALID_ARGUMENT,
                        f"undecodable {cls.__name__} ({len(raw)} bytes): {err}") from None


def generic_handler(service: Any, count_rejected: Callable[[str], None]
                    ) -> grpc.GenericRpcHandler:
    """Handlers taking raw bytes: unary requests are decoded before the servicer sees them,
    StreamChannel gets the raw iterator and decodes each message itself."""
    handlers = {}
    for name, (arity, req_cls, resp_cls) in METHODS.items():
        method = getattr(service, name)
        if arity != "stream_stream":
            method = _decoding(method, req_cls, count_rejected)
        make = getattr(grpc, f"{arity}_rpc_method_handler")
        handlers[name] = make(method, request_deserializer=None,
                              response_serializer=resp_cls.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def _decoding(method: Callable, cls: type, count_rejected: Callable[[str], None]) -> Callable:
    def handler(raw: bytes, context: grpc.ServicerContext):
        try:
            request = decode(cls, raw)
        except P4RTError as err:
            count_rejected("p4rt_undecodable")
            context.abort(err.code, err.message)
        return method(request, context)
    return handler


def check_batch(n_updates: int) -> None:
    if n_updates > MAX_UPDATES_PER_WRITE:
        raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"a WriteRequest may carry at most {MAX_UPDATES_PER_WRITE} updates "
                        f"(got {n_updates}): split the batch, so that each update's status "
                        "fits in gRPC's metadata limit; nothing was applied")


def batch_status(results: list[P4RTError | None]) -> status_pb2.Status:
    """google.rpc.Status with one p4.v1.Error per update, within STATUS_BUDGET bytes: messages
    are cut to MAX_ERROR_MESSAGE characters, and once the budget is used up later failures
    keep their code and lose their message (the top-level message says how many)."""
    failed = sum(r is not None for r in results)
    errors = []
    for r in results:
        err = p4runtime_pb2.Error(canonical_code=code_pb2.OK)
        if r is not None:
            err.canonical_code = r.code.value[0]
            err.message = r.message[:MAX_ERROR_MESSAGE]
        errors.append(err)
    status = status_pb2.Status(code=code_pb2.UNKNOWN)
    for err in errors:
        status.details.add().Pack(err)
    omitted = 0
    for i in reversed(range(len(errors))):
        if status.ByteSize() <= STATUS_BUDGET - 200:  # room for the top-level message
            break
        if errors[i].message:
            errors[i].message = ""
            status.details[i].Pack(errors[i])
            omitted += 1
    first = next(r for r in results if r is not None)
    status.message = (f"{failed} of {len(results)} updates failed: "
                      f"{first.message[:MAX_ERROR_MESSAGE]}")
    if omitted:
        status.message += f" ({omitted} later messages omitted to fit the metadata limit)"
    return status
