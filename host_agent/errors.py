"""The one base of host_agent's exceptions: a caller catches it to catch anything
host_agent refuses (each class also keeps the builtin it always was, so older callers
still catch it by that)."""


from host_agent.core import MrcHostError


class HostAgentError(MrcHostError):
    """Anything a host agent, its control socket or its NICs refuse or fail at."""
