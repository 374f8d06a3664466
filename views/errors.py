"""The one base of views's exceptions: a caller catches it to catch anything
views refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class ViewError(Exception):
    """Anything the report or the live view refuses or fails at."""
