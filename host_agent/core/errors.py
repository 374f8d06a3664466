"""Protocol errors, split h11-style by whose fault they are."""


class LocalProtocolError(Exception):
    """The caller used the API wrongly (illegal transition, unknown QP, bad argument)."""


class RemoteProtocolError(Exception):
    """The peer sent something invalid; the endpoint counts it and drops the packet."""
