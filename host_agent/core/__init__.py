"""The sans-IO MRC transport: an Endpoint that never touches a socket, a thread or the clock.

Feed it received UDP payloads (Endpoint.receive_packet with RxMeta), send what
Endpoint.packets_to_send returns (TxPacket), call Endpoint.handle_timer when Endpoint.get_timer
passes, and drain Endpoint.next_event. Every entry point takes `now`. These names are the API;
the submodules are its implementation.
"""

from host_agent.core.cc import (
    DEFAULT_BASE_RTT,
    DEFAULT_MTU,
    CongestionControl,
    FixedWindow,
    Nscc,
    NsccConfig,
)
from host_agent.core.config import EndpointConfig, RecoveryMode
from host_agent.core.endpoint import MAX_PLANES, MAX_QPN, MIN_QPN, Endpoint
from host_agent.core.errors import (
    ConfigError,
    LocalProtocolError,
    MalformedPacket,
    MrcHostError,
    ProtocolError,
    RemoteProtocolError,
)
from host_agent.core.events import (
    Event,
    EvStateChanged,
    FailReason,
    MessageReceived,
    PeerPlaneChanged,
    PlaneStateChanged,
    WriteCompleted,
    WriteFailed,
)
from host_agent.core.evstate import EvConfig, EvTrigger, Pool
from host_agent.core.memory import MemoryRegion
from host_agent.core.types import EvState, PathInfo, RxMeta, TxPacket

__all__ = [
    "DEFAULT_BASE_RTT", "DEFAULT_MTU", "MAX_PLANES", "MAX_QPN", "MIN_QPN", "CongestionControl",
    "ConfigError", "Endpoint", "EndpointConfig", "EvConfig", "EvState", "EvStateChanged",
    "EvTrigger", "Event", "FailReason", "FixedWindow", "LocalProtocolError", "MalformedPacket",
    "MemoryRegion", "MessageReceived", "MrcHostError", "Nscc", "NsccConfig", "PathInfo",
    "PeerPlaneChanged", "PlaneStateChanged", "Pool", "ProtocolError", "RecoveryMode",
    "RemoteProtocolError", "RxMeta", "TxPacket", "WriteCompleted", "WriteFailed",
]  # fmt: skip
