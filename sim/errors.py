"""The one base of sim's exceptions: a caller catches it to catch anything
sim refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class SimError(Exception):
    """Anything the simulator refuses or fails at."""
