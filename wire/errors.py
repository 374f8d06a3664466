"""The one base of wire's exceptions: a caller catches it to catch anything
wire refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class PacketError(Exception):
    """Anything the packet formats refuse: a malformed frame, a dissector that cannot be written."""
