"""Protocol errors, split h11-style by whose fault they are."""

from __future__ import annotations

import wire


class MrcHostError(Exception):
    """The one base of the host_agent package: the core's ProtocolError and the agent's
    HostAgentError (host_agent.errors) both derive from it."""


class ProtocolError(MrcHostError):
    """Any error of the MRC core: Local (the caller's misuse) or Remote (the peer's packet)."""


class LocalProtocolError(ProtocolError):
    """The caller used the API wrongly (illegal transition, unknown QP, bad argument)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something invalid; the endpoint counts it and drops the packet."""


class ConfigError(LocalProtocolError, ValueError):
    """A configuration field is out of range; the message names the field and the fix."""


class MalformedPacket(RemoteProtocolError):
    """A received payload does not decode; the wire codec's reason is the message."""


def decode_received(data: bytes) -> wire.Packet:
    """Decode a payload from the network: its faults are the peer's, so they are remote errors."""
    try:
        return wire.decode_packet(data)
    except wire.WireError as exc:
        raise MalformedPacket(str(exc)) from exc

