"""The protocol between an endpoint's user and the process that serves it, declared once for
both sides: served_core.endpoint (the user: the grader's simulator, an agent) and
rubrics.core_server (the student's endpoints, in the sandbox).

One JSON object per line. A request names an operation ("op"), the endpoint ("h") and its
arguments; the reply holds the endpoint's timer ("timer") and, for "pump", the packets to send
("tx") and the events ("events"), or {"raised": text} when the student's code raised. Bytes
travel as base64. A packet names its route by its index in the endpoint's route book (the
routes the grader gave it, in connect order), never by address: the sandbox cannot send where
the grader did not let it. Events are their dataclass's fields by name, enums by member name.

Everything read from the sandbox is untrusted: decode_event and the readers below check every
type and range and raise ProtocolViolation with what was wrong.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import json
import math
from typing import Any

from host_agent import core as core_events
from host_agent.core import EvState
from served_core.errors import ServedCoreError

OPS = ("new", "connect", "disconnect", "register", "deregister", "post_write", "receive", "timer",
       "plane", "pump", "counters", "stats", "ev_states", "deny", "peer_planes")
_E = core_events
EVENT_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    _E.WriteCompleted, _E.WriteFailed, _E.MessageReceived, _E.EvStateChanged,
    _E.PeerPlaneChanged, _E.PlaneStateChanged)}
MAX_EVENTS = 100_000  # in one reply: an endpoint that emits more is looping


class ProtocolViolation(ServedCoreError, ValueError):
    """A line from the sandbox that the protocol does not allow: the message says what."""


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def parse(raw: bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        raise ProtocolViolation("a reply that is not JSON") from None
    if not isinstance(message, dict):
        raise ProtocolViolation("a reply that is not a JSON object")
    return message


def pack(data: bytes | bytearray | memoryview) -> str:
    return base64.b64encode(data).decode("ascii")


def unpack(text: Any, limit: int) -> bytes:
    if not isinstance(text, str) or len(text) > (limit + 2) // 3 * 4:
        raise ProtocolViolation(f"bytes that are not base64 of at most {limit} bytes")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolViolation("bytes that are not base64") from None


def integer(value: Any, what: str, low: int = 0, high: int = (1 << 63) - 1) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ProtocolViolation(f"{what} {value!r:.40} is not an integer in {low}..{high}")
    return value


def timer(value: Any) -> float | None:
    """The endpoint's timer: None or a finite number."""
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ProtocolViolation(f"timer {value!r:.40} is neither null nor a finite number")
    return float(value)


# ---- events -------------------------------------------------------------------------------
def encode_event(event: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"type": type(event).__name__}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        row[f.name] = value.name if isinstance(value, EvState) else (
            int(value) if isinstance(value, enum.IntEnum) else value)
    return row


def ev_state(value: Any, what: str = "state") -> EvState:
    if not isinstance(value, str) or value not in EvState.__members__:
        raise ProtocolViolation(f"{what} {value!r:.40} is not an EV state")
    return EvState[value]


def _field(cls: type, name: str, annotation: str, value: Any) -> Any:
    what = f"{cls.__name__}.{name}"
    if annotation == "EvState":
        return ev_state(value, what)
    if annotation == "bool":
        if type(value) is not bool:
            raise ProtocolViolation(f"{what} {value!r:.40} is not true or false")
        return value
    if annotation == "str":
        if not isinstance(value, str) or len(value) > 200:
            raise ProtocolViolation(f"{what} is not a short text")
        return value
    if annotation == "int | None" and value is None:
        return None
    return integer(value, what)  # int, a FailReason's int, a peer (a host number)


def decode_event(row: Any) -> Any:
    """The trusted event class for one row of a reply's "events"."""
    if not isinstance(row, dict) or row.get("type") not in EVENT_TYPES:
        raise ProtocolViolation(f"an event of unknown type {str(row)[:60]}")
    cls = EVENT_TYPES[row["type"]]
    fields = dataclasses.fields(cls)
    if set(row) != {"type", *(f.name for f in fields)}:
        raise ProtocolViolation(f"a {cls.__name__} event with fields {sorted(row)}")
    return cls(**{f.name: _field(cls, f.name, str(f.type), row[f.name]) for f in fields})
