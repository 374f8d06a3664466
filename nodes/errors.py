"""The one base of nodes's exceptions: a caller catches it to catch anything
nodes refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class NodeError(Exception):
    """Anything a switch node refuses or fails at."""
