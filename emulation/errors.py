"""The one base of emulation's exceptions: a caller catches it to catch anything
emulation refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class EmulationError(Exception):
    """Anything the emulated network refuses or fails at, on one server or several."""
