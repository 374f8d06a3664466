"""The one base of grader's exceptions: a caller catches it to catch anything
grader refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class GraderError(Exception):
    """Anything the grader refuses or fails at: a submission, a course key, a sandbox, a report."""
