"""The one base of bench's exceptions: a caller catches it to catch anything
bench refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class BenchmarkError(Exception):
    """Anything a benchmark refuses or fails at."""
