"""The one base of controller's exceptions: a caller catches it to catch anything
controller refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


class ControllerError(Exception):
    """Anything the controller refuses or fails at: a compile, an install, the shell."""
