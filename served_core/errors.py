"""The one base of the served core's exceptions: a caller catches it to catch anything the
served process did wrong (it raised, stopped answering, or broke the protocol)."""


class ServedCoreError(Exception):
    """Anything a served endpoint failed at."""
