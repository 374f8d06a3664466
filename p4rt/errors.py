"""The one base of p4rt's exceptions: a caller catches it to catch anything
p4rt refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class P4rtError(Exception):
    """Anything the P4 program's control contract refuses: a P4Info, a pipeline, a corpus, keys."""
