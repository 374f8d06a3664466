"""One MRC host agent process: an Endpoint on the host's NICs plus a local control socket.

    python -m host_agent.agent --host 0 --planes 4 --t0 2 --t1 2 --hosts-per-t0 2 \\
        --socket /tmp/h0.sock [--paths paths.json] [--log h0.log]

Start one per host inside the host's network namespace (Mininet: host.popen(...)); drive it
with `python -m host_agent.cli --socket PATH ...` or control.ControlClient. It runs until
SIGTERM, SIGINT or the `shutdown` command, then closes its sockets and removes the socket file.

Conventions:
- QPNs: with --exchange-qps (what emulation.network runs), each QP's QPN and initial PSN come
  from `secrets` and are exchanged out of band through the control sockets (qp_info on both
  sides, then qp_connect with the other's answer), as RC applications exchange them over TCP;
  only exchanged QPs take packets. Without it (a hand-run agent), the QP towards peer P is
  0x100 + P with PSNs from 0 (hostconfig.qpn_for), opened on the first command naming a peer
  or the first packet from it (--connect-all opens them all at start).
- Modes (host_agent.modes): `--mode mrc` sprays one QP per peer; `--mode roce[:K]` opens K QPs
  per peer (default one per plane), each pinned to a plane and hashed by ECMP, and stripes
  every write over them; `single_port` is roce with one QP, on plane 0. qp_info/qp_connect
  take the QP's `lane`.
- Test pattern: `write` sends random.Random(seed).randbytes(n); `verify` on the receiver
  regenerates it from the same seed and compares byte for byte.

Kernel interference: see host_agent.nic.kernel_setup.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from fabric import hostpaths
from fabric.errors import FabricError
from fabric.options import add_fabric_args, fabric_from_args
from fabric.outfile import open_log_file
from host_agent.commands import Commands
from host_agent.control import ControlServer, RequestError
from host_agent.core import Endpoint, EndpointConfig, MrcHostError
from host_agent.driver import Driver
from host_agent.hostconfig import HostConfig, HostConfigError
from host_agent.modes import MODE_HELP, MRC_MODE, AgentMode, roce_endpoint_config
from host_agent.nic import kernel_setup
from wire.layout import FULL_DATA_FRAME_LEN

log = logging.getLogger("host_agent")

# Two Python agents' processing and scheduling per round trip (docs/decisions.md, "Base RTT").
# It is also the agent's base RTT when none is given: back to back, it is the whole RTT
# (emulation.netconfig.base_rtt_for adds the fabric's hops and delays to it).
AGENT_OVERHEAD_S = 0.005


class Agent:
    """Wires the endpoint, the driver, the control server and signals together."""

    def __init__(self, config: HostConfig, endpoint_config: EndpointConfig, socket_path: str,
                 seed: int | None, mode: AgentMode = MRC_MODE, exchange: bool = False,
                 rx_hold: float = 0.0, endpoint: Any = None) -> None:
        """`endpoint`: one built elsewhere (served_core.agent: a core served from another
        process) instead of one in this process."""
        self.config = config
        self.exchange = exchange
        self.mode = mode
        self.endpoint = endpoint if endpoint is not None else Endpoint(
            endpoint_config, planes=config.planes, name=f"h{config.host}", seed=seed)
        self.commands = Commands(self)
        self.driver = Driver(self.endpoint, config, on_event=self.commands.on_event, mode=mode,
                             rx_hold=rx_hold)
        self.driver.adapter.accept_peers = not exchange  # only exchanged QPs take packets
        self.socket_path = socket_path
        self._wake_r, self._wake_w = socket.socketpair()

    def qpns(self, peer: int) -> list[int]:
        """The local QPNs to `peer` by lane: the exchanged ones, or (without --exchange-qps)
        opened by the QPN convention on first use."""
        if not self.exchange:
            return self.driver.ensure_connected(peer)
        qpns = self.driver.adapter.qpns_of(peer)
        if len(qpns) < self.mode.qps:
            raise RequestError(f"{len(qpns)} of {self.mode.qps} QPs to h{peer} open: with "
                               "--exchange-qps, QPs open only through qp_info/qp_connect")
        return qpns

    def run(self, connect_all: bool) -> None:
        self.driver.open()
        server = None
        old_wakeup = -1
        try:
            if connect_all and not self.exchange:
                for peer in sorted(self.config.paths):
                    self.driver.ensure_connected(peer)
            server = ControlServer(self.socket_path, self.driver.loop, self.commands.handle)
            for sock in (self._wake_r, self._wake_w):
                sock.setblocking(False)
            old_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
            self.driver.loop.add_reader(self._wake_r, self._drain_wakeup)
            log.info("host %d agent ready on %s", self.config.host, self.socket_path)
            self.driver.run()
        finally:
            self.commands.fail_pending("the agent is shutting down")
            if server is not None:
                server.close()
            signal.set_wakeup_fd(old_wakeup)
            self.driver.close()
            self._wake_r.close()
            self._wake_w.close()
            log.info("host %d agent stopped", self.config.host)

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.info("signal %d: shutting down", signum)
        self.driver.stop()

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except (BlockingIOError, InterruptedError):
            return


def parse_args(argv: list[str] | None,
               extend: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m host_agent.agent", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", type=int, required=True, help="this host's global index")
    p.add_argument("--paths", help="path-set JSON (fabric.hostpaths.export); "
                   "overrides the fabric parameters")
    add_fabric_args(p)
    p.add_argument("--socket", required=True, help="control socket path")
    p.add_argument("--log", help="log file (default: stderr)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING"))
    p.add_argument("--base-rtt", type=float, default=AGENT_OVERHEAD_S,
                   help="base RTT in seconds, including the agents' own processing; scales "
                   f"every core timer (EndpointConfig.for_base_rtt). Default {AGENT_OVERHEAD_S}")
    p.add_argument("--nic-rate", type=float, default=None, metavar="PPS",
                   help="each NIC's rate in full data frames per second: sizes the congestion "
                   "window from the path's bandwidth-delay product with --base-rtt (never "
                   "below the defaults); default: the defaults")
    p.add_argument("--seed", type=int,
                   help="INSECURE, for reproducible experiments only: derive rkeys, addresses "
                        "and EV tags from this seed, so anyone who knows it can forge them "
                        "(default: the OS's cryptographic source)")
    p.add_argument("--keep-ipv6", action="store_true",
                   help="keep kernel IPv6 on the NICs (kernel TCP baselines), quietened")
    p.add_argument("--no-kernel-setup", action="store_true",
                   help="leave sysctls and offloads alone")
    p.add_argument("--write-timeout", type=float, default=EndpointConfig.write_timeout,
                   help="seconds a QP's outstanding writes may go without any data acknowledged "
                        "before they fail, and the QP with them (default %(default)s)")
    p.add_argument("--connect-all", action="store_true", help="open QPs to every peer at start")
    p.add_argument("--exchange-qps", action="store_true",
                   help="QPNs and initial PSNs from secrets, exchanged out of band through the "
                   "control socket (qp_info/qp_connect) instead of the 0x100+host convention")
    p.add_argument("--mode", default="mrc", help=MODE_HELP)
    p.add_argument("--rx-hold-ms", type=float, default=0.0,
                   help="interrupt moderation: after a wake-up with frames, read the NICs "
                   "again only this many ms later unless a timer is due (default 0: off; "
                   "host_agent.loop)")
    if extend is not None:
        extend(p)
    return p.parse_args(argv)


def load_host_config(args: argparse.Namespace) -> HostConfig:
    if args.paths:
        with open(args.paths, encoding="utf-8") as f:
            fabric, paths = hostpaths.load(f.read())
    else:
        fabric = fabric_from_args(args)
        paths = list(hostpaths.all_host_paths(fabric, args.host))
    if not 0 <= args.host < fabric.hosts:
        raise HostConfigError(f"--host {args.host}: the fabric has hosts 0..{fabric.hosts - 1}")
    return HostConfig.from_paths(args.host, fabric.planes, paths)


def line_rate_bps(nic_rate_pps: float | None, planes: int, sprays: bool) -> float | None:
    """What one connection can send at: every NIC for an MRC QP, which sprays over all
    planes; one NIC for a RoCE-like QP, which keeps to one path."""
    if nic_rate_pps is None:
        return None
    if nic_rate_pps <= 0:
        raise ValueError(f"--nic-rate {nic_rate_pps:g}: must be > 0 packets/s")
    return nic_rate_pps * FULL_DATA_FRAME_LEN * 8 * (planes if sprays else 1)


def agent_endpoint_config(mode: AgentMode, base_rtt: float, line_rate: float | None,
                          write_timeout: float) -> EndpointConfig:
    """The agent's core configuration: timers from the base RTT, the window from the line
    rate (roce modes: the RoCE-like configuration). One definition: a core the grader
    serves from a sandbox (rubrics.core_server) is built by it too."""
    if not mode.is_mrc:
        return roce_endpoint_config(base_rtt, line_rate_bps=line_rate,
                                    write_timeout=write_timeout)
    return EndpointConfig.for_base_rtt(base_rtt, line_rate_bps=line_rate,
                                       write_timeout=write_timeout)


# An endpoint built instead of the agent's own: (args, host config, endpoint config, mode,
# line rate) -> endpoint (served_core.agent's, a core served from another process).
MakeEndpoint = Callable[[argparse.Namespace, HostConfig, EndpointConfig, AgentMode,
                         float | None], Any]


def main(argv: list[str] | None = None, *,
         extend: Callable[[argparse.ArgumentParser], None] | None = None,
         make_endpoint: MakeEndpoint | None = None,
         refusals: tuple[type[Exception], ...] = ()) -> int:
    """The agent process; `extend` adds options and `make_endpoint` builds the endpoint
    from them (served_core.agent), else the agent runs its own core. `refusals`: the base of
    what that endpoint raises, logged and reported like the agent's own."""
    args = parse_args(argv, extend)
    try:  # root may run an agent by hand: the file is opened as fabric.outfile says
        stream = open_log_file(args.log) if args.log else None
    except FabricError as exc:  # fabric.outfile refused the file (its unit's base)
        print(f"agent: --log: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        stream=stream, level=args.log_level,
        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_host_config(args)
        mode = AgentMode.parse(args.mode, config.planes)
        line = line_rate_bps(args.nic_rate, config.planes, mode.is_mrc)
        endpoint_config = agent_endpoint_config(mode, args.base_rtt, line, args.write_timeout)
        if not args.no_kernel_setup:
            for nic in config.nics:
                kernel_setup(nic.ifname, args.keep_ipv6)
        if args.seed is not None:
            log.warning("--seed %d: keys and EV tags are predictable (reproducible run, "
                        "insecure)", args.seed)
        endpoint = None if make_endpoint is None else \
            make_endpoint(args, config, endpoint_config, mode, line)
        Agent(config, endpoint_config, args.socket, args.seed, mode,
              args.exchange_qps, rx_hold=args.rx_hold_ms / 1000,
              endpoint=endpoint).run(args.connect_all)
    except (MrcHostError, FabricError, ValueError, OSError, *refusals) as exc:  # units' bases
        log.error("%s", exc)
        print(f"host agent: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.umask(0o077)  # the control socket lets anyone who can open it drive the host
    sys.exit(main())
