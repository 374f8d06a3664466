"""The one base of fabric's exceptions: a caller catches it to catch anything
fabric refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class FabricError(Exception):
    """Anything the fabric model or the shared options refuse."""
