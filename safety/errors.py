"""The one base of safety's exceptions: a caller catches it to catch anything
safety refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class SafetyError(Exception):
    """Anything a run's hold on the shared machine refuses: a planted file, a port, a guard."""
