"""The one base of the sandbox's exceptions: a caller catches it to catch anything the sandbox
refuses or fails at (it cannot be set up here, or a contained command broke its protocol)."""


class ContainmentError(RuntimeError):
    """Anything the sandbox refuses or fails at."""


class SandboxError(ContainmentError):
    """The sandbox cannot be set up here (bwrap missing, user namespaces off, bad paths)."""
