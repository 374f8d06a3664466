"""A host agent whose endpoint lives in another process (--served-core SOCKET): the grader's
live stage, whose student core runs in the sandbox (rubrics.core_server) and answers over a
Unix socket the grader relays. Everything else is host_agent.agent's: the same options,
NICs, driver and control socket.

    python -m served_core.agent --host N --socket S --served-core SOCKET [agent options]
"""

from __future__ import annotations

import argparse
import os
import sys

from host_agent import agent
from host_agent.core import EndpointConfig
from host_agent.hostconfig import HostConfig
from host_agent.modes import AgentMode
from served_core.endpoint import RemoteEndpoint, SocketLink
from served_core.errors import ServedCoreError


def add_served_arg(p: argparse.ArgumentParser) -> None:
    p.prog = "python -m served_core.agent"
    p.add_argument("--served-core", metavar="SOCKET", required=True,
                   help="the endpoint lives in another process, reached over this Unix socket "
                        "(served_core.endpoint): the grader's live stage, whose student core "
                        "runs in a sandbox")


def served_endpoint(args: argparse.Namespace, config: HostConfig,
                    endpoint_config: EndpointConfig, mode: AgentMode,
                    line_rate: float | None) -> RemoteEndpoint:
    """The endpoint behind --served-core, built there as the agent's own would be
    (host_agent.agent.agent_endpoint_config)."""
    name = f"h{config.host}"
    seed, base_rtt, write_timeout = args.seed, args.base_rtt, args.write_timeout
    link = SocketLink(args.served_core)
    link.call({"op": "new", "h": config.host, "kind": "agent", "mode": mode.name,
               "planes": config.planes, "base_rtt": base_rtt, "line_rate_bps": line_rate,
               "write_timeout": write_timeout, "name": name, "seed": seed})
    return RemoteEndpoint(link, config.host, config.planes, name, endpoint_config)


def main(argv: list[str] | None = None) -> int:
    """host_agent.agent's main; a served process that fails the run (ServedCoreError, the
    student's error) is logged and reported as the agent's own refusals are."""
    return agent.main(argv, extend=add_served_arg, make_endpoint=served_endpoint,
                      refusals=(ServedCoreError,))


if __name__ == "__main__":
    os.umask(0o077)  # as host_agent.agent: the control socket lets anyone who opens it drive
    sys.exit(main())
