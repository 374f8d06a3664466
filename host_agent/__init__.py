"""The MRC endpoint of a host: a sans-IO core (host_agent.core) in a thin driver over raw
sockets, with a control socket for transfers and statistics."""
