"""Running contenders on one emulated fabric: networks, agent modes, failure injection.

Contenders, all on the whole NIC unless named otherwise: `mrc` (one QP sprayed over every plane
and path), `roce` (one RoCE-like QP per plane, each hash-pinned by the baseline ECMP,
go-back-N; writes striped over them), `roce:8` / `roce:16` (8 / 16 QPs spread over the planes),
`tcp` (one kernel TCP connection per plane) and `mptcp` (one subflow per plane), plus the
plane-0-only extra `single_port` (one RoCE-like QP). They run one after the other on the same
running fabric with the same port rates.

Failures are injected by a timer thread started when every flow can send (agents: just
before the writes are posted; kernel flows: once every client has connected). The link to
fail is the plane-0 uplink of the sender's T0 that carried the most packets since then
(root-namespace interface counters): plane 0 is where every single-path contender runs, so
the failure always hits a path the flow is using.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bench import metrics
from bench.contenders.kernel_flows import mptcp_enabled
from bench.contenders.kernel_run import run_kernel_flows
from bench.contenders.mrc_flows import CHUNK, DEPTH, FlowSpec, run_flows
from bench.errors import BenchmarkError
from demo.flow import ev_layout
from emulation.network import MrcNetwork, NetworkConfig
from host_agent.core import DEFAULT_MTU
from host_agent.modes import AgentMode, ModeError
from wire.layout import FULL_DATA_FRAME_LEN

CONTENDERS = ("mrc", "roce", "roce:8", "roce:16", "tcp", "mptcp", "single_port")
KERNEL = ("tcp", "mptcp")
FAILURE_PLANE = 0
QUIET_POLL_S = 0.25
QUIET_LIMIT_S = 30.0
FLAP_HALF_PERIOD_S = 0.5  # a flapping link is down 0.5 s, up 0.5 s, ...
SETTLE_S = 0.5  # after convergence_delay: routes written back, queues drained
BUSY_WAIT_S = 900.0  # longest wait for another network on this machine to go away


class BenchError(BenchmarkError, RuntimeError):
    """The bench could not run a scenario (bad contender or failure kind); says what to do."""


def open_network(config: NetworkConfig, log: Callable[[str], None]) -> MrcNetwork:
    """Start a fabric, waiting up to BUSY_WAIT_S for another one on this machine to go away
    (MrcNetwork's fabric lock, then its wait for the fabric's interfaces to disappear)."""
    net = MrcNetwork(replace(config, lock_timeout=BUSY_WAIT_S), log=log)
    net.start()
    return net


def agent_mode(net: MrcNetwork, name: str) -> AgentMode:
    try:
        return AgentMode.parse(name, net.fabric.planes)
    except ModeError as exc:
        raise BenchError(f"unknown contender {name!r}; choose from {', '.join(CONTENDERS)}"
                         ) from exc


def set_mode(net: MrcNetwork, specs: list[FlowSpec], name: str) -> None:
    """Put the agents of every flow's hosts in the contender's mode, with fresh QPs: every
    run draws new EV tags, so the baseline ECMP hashes each run's QPs anew (a new salt)."""
    mode = agent_mode(net, name)
    hosts = sorted({h for s in specs for h in (s.src, s.dst)})
    for host in hosts:
        net.set_agent_mode(host, mode)
    net.exchange_qps(hosts)


def kernel_skip_reason(name: str) -> str | None:
    if name != "mptcp":
        return None
    ok, why = mptcp_enabled()
    return None if ok else why


def run_contender(net: MrcNetwork, name: str, specs: list[FlowSpec], timeout: float,
                  on_start: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """One contender's flows, concurrently; `on_start` runs as the first of them starts
    sending, so a failure timed from it lands inside the flows however long their set-up."""
    if name in KERNEL:
        return run_kernel_flows(net, specs, name, timeout=timeout,
                                on_start=(lambda _t: on_start()) if on_start else None)
    set_mode(net, specs, name)
    return run_flows(net, specs, timeout=timeout, depth=write_depth(net.config),
                     on_start=on_start)


BDP_WRITES = 16  # bandwidth-delay products of writes a flow keeps outstanding


def write_depth(config: NetworkConfig) -> int:
    """Writes a flow keeps outstanding: enough CHUNKs to hold BDP_WRITES times the path's
    bandwidth-delay product (every plane at the port rate over the base RTT), never fewer
    than DEPTH. An application that posts less measures itself, not the transport: under 1%
    loss a chunk with a lost packet holds its slot two or three RTTs, and one whose resend
    is lost too holds it for an RTO, when the RTT has grown by the NIC's queue as well: on
    59 ms links 4 BDPs stalled the sender for a second at a time (MRC 0.73 of capacity), 16
    did not (docs/benchmarks.md, "The loss experiment")."""
    bdp = path_bdp_bytes(config)
    return DEPTH if bdp is None else max(DEPTH, math.ceil(BDP_WRITES * bdp / CHUNK))


def path_bdp_bytes(config: NetworkConfig) -> float | None:
    """Payload bytes one host's NICs hold in flight: every plane at the port rate over the
    agents' base RTT; None when the rate is unlimited (no product to size from)."""
    rate = config.port_rate_pps
    if not isinstance(rate, int):
        return None
    return config.fabric.planes * rate * config.effective_base_rtt * DEFAULT_MTU


def payload_bytes(name: str, flows: list[dict[str, Any]]) -> int:
    """Payload per packet: the agents' MTU, or the kernel's MSS as the client measured it."""
    if name not in KERNEL:
        return DEFAULT_MTU
    mss = [f["mss"] for f in flows if f.get("mss")]
    return min(mss) if mss else DEFAULT_MTU


class Injector:
    """Breaks something `after` seconds into the flow, from a thread.

    kind: "link" (busiest plane-0 uplink of the sender's T0), "nic" (the receiver's plane-0
    NIC link), "reboot" (the T1 at the far end of that busiest uplink restarts), "flap" (that
    uplink goes down and up every FLAP_HALF_PERIOD_S until finish(): a flapping transceiver).
    """

    def __init__(self, net: MrcNetwork, src: int, dst: int, after: float, kind: str) -> None:
        self.net, self.src, self.dst, self.after, self.kind = net, src, dst, after, kind
        fabric = net.fabric
        t0 = fabric.t0(FAILURE_PLANE, fabric.nic(src, FAILURE_PLANE).t0)
        self.t0 = t0.name
        self.uplinks = {fabric.t1(FAILURE_PLANE, j).name: fabric.uplink_port(j)
                        for j in range(fabric.t1_per_plane)}
        self.info: dict[str, Any] = {"kind": kind}
        self.undo: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def arm(self) -> None:
        """Start counting uplink packets (the busiest uplink is chosen from these counts,
        read through the T0's node: it may run on another server)."""
        self._base = self.net.port_sent(self.t0)

    def start(self) -> None:
        self.arm()
        self._thread = threading.Thread(target=self._run, daemon=True, name="injector")
        self._thread.start()

    def _run(self) -> None:
        try:
            if not self._stop.wait(self.after):
                self.fire()
            if self.kind == "flap":
                up = False
                while not self._stop.wait(FLAP_HALF_PERIOD_S):
                    self._set_flap(up)
                    up = not up
        except Exception as exc:  # reported in the results, not swallowed
            self.info["error"] = f"{type(exc).__name__}: {exc}"

    def fire(self) -> None:
        sent = self.net.port_sent(self.t0)
        used = {spine: sent[p] - self._base[p] for spine, p in self.uplinks.items()}
        spine = max(used, key=lambda s: used[s])
        net = self.net
        self.info["at"] = time.monotonic()
        if self.kind == "link":
            net.link_down(self.t0, spine)
            self.info.update(link=[self.t0, spine])
            self.undo = lambda: net.link_up(self.t0, spine)
        elif self.kind == "nic":
            net.nic_down(self.dst, FAILURE_PLANE)
            self.info.update(nic=[self.dst, FAILURE_PLANE])
            self.undo = lambda: net.nic_up(self.dst, FAILURE_PLANE)
        elif self.kind == "flap":
            self.info.update(link=[self.t0, spine], half_period_s=FLAP_HALF_PERIOD_S, flaps=0)
            self._flap_link = (self.t0, spine)
            self._set_flap(False)
        elif self.kind == "reboot":
            self.info.update(switch=spine, reboot_s=net.reboot_switch(spine))
        else:
            raise BenchError(f"unknown failure kind {self.kind!r}")
        self.info["uplink_packets_before"] = used

    def _set_flap(self, up: bool) -> None:
        a, b = self._flap_link
        if up:
            self.net.link_up(a, b)
            self.undo = None
        else:
            self.net.link_down(a, b)
            self.info["flaps"] += 1
            self.undo = lambda: self.net.link_up(a, b)

    def finish(self) -> dict[str, Any]:
        """Stop waiting, repair what was broken, wait until baseline routes are back and the
        sender's agent has stopped sending (a timed-out write keeps running in the agent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.undo is not None:
            self.undo()
            time.sleep(self.net.config.convergence_delay + SETTLE_S)
        self.info["quiet_after_s"] = wait_quiet(self.net, self.src)
        return self.info


def _wait_settled(read: Callable[[], int], slack: int) -> float | None:
    """Seconds until a growing counter grew by less than `slack` in QUIET_POLL_S (None: still
    growing after QUIET_LIMIT_S)."""
    start = time.monotonic()
    last = read()
    while time.monotonic() - start < QUIET_LIMIT_S:
        time.sleep(QUIET_POLL_S)
        value = read()
        if value - last < slack:
            return time.monotonic() - start
        last = value
    return None


def wait_quiet(net: MrcNetwork, host: int) -> float | None:
    """Seconds until the host's agent sends no more data packets (None: still sending)."""
    return _wait_settled(lambda: net.stats(host)["endpoint"]["tx_data_packets"], 1)


def fabric_sent_bytes(net: MrcNetwork) -> int:
    return sum(sum(net.port_sent_bytes(sw.name).values()) for sw in net.fabric.switches)


def wait_fabric_quiet(net: MrcNetwork) -> float | None:
    """Seconds until the whole fabric sent less than one full data frame's bytes in
    QUIET_POLL_S (probes and port status may go on; None: still busy after QUIET_LIMIT_S).
    A contender's flows can be done while frames it queued still drain, e.g. a go-back-N
    storm's resends in a paced NIC's queue (up to CLASS_LIMIT frames, 11 s at 90 packets/s);
    the next contender must not share the fabric with them."""
    return _wait_settled(lambda: fabric_sent_bytes(net), FULL_DATA_FRAME_LEN)


def relative_failure(info: dict[str, Any], flow: dict[str, Any]) -> float | None:
    """Failure time in the flow's own time axis (seconds since its start)."""
    if "at" not in info or "start" not in flow:
        return None
    return info["at"] - flow["start"]


def retire_rtts(net: MrcNetwork, src: int, routes: set[str], at: float) -> float | None:
    """(last data packet the sender put on `routes`, those over the failed link - failure) /
    base RTT."""
    per_route = net.stats(src).get("per_route", {})
    last = max((v["last_data_tx"] for r, v in per_route.items() if r in routes), default=None)
    if last is None:
        return None
    return max(0.0, last - at) / net.config.effective_base_rtt


def retired_per_route(net: MrcNetwork, src: int, dst: int) -> tuple[int, Counter[str]]:
    """An MRC sender's QP towards dst and, per route, how many times its EVs there moved into
    ASSUMED_BAD so far (the agent's per-EV `retired` counters; a new QP starts from 0)."""
    qpn, evs = ev_layout(net, src, dst)
    out: Counter[str] = Counter()
    for info in evs.values():
        out[info["route"]] += int(info["retired"])
    return qpn, out


def retirements(before: tuple[int, Counter[str]], after: tuple[int, Counter[str]],
                failed_routes: set[str]) -> dict[str, int]:
    """EVs retired between two retired_per_route() readings, on the failed routes and on
    every other (healthy) route: a healthy route should keep its EVs (issue 14)."""
    start = before[1] if before[0] == after[0] else Counter()
    delta = after[1] - start
    failed = sum(n for route, n in delta.items() if route in failed_routes)
    return {"failed_route_retirements": failed,
            "healthy_route_retirements": sum(delta.values()) - failed}


def flow_summary(flows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-contender figures over its flows (completion percentiles, aggregate goodput)."""
    done = [f["completion_s"] for f in flows if f.get("completion_s") is not None]
    starts = [f["start"] for f in flows if "start" in f]
    ends = [f["start"] + f["completion_s"] for f in flows if f.get("completion_s") is not None]
    total = sum(f.get("delivered", 0) for f in flows)
    out: dict[str, Any] = {"flows": len(flows), "ok": all(f.get("ok") for f in flows),
                           "completed": len(done), "bytes": total}
    if done:
        out["completion_s"] = metrics.distribution(done)
    if starts and ends and len(done) == len(flows):
        span = max(ends) - min(starts)
        out["aggregate_goodput_bps"] = total * 8 / span if span > 0 else None
    # sender-side counters add up over flows; receiver-side ones are host totals over
    # overlapping windows when flows share a receiver, so the largest stands for them all
    for key in ("retransmits", "timeouts", "spurious_timeouts", "nacks", "tx_data_packets"):
        values = [f[key] for f in flows if key in f]
        if values:
            out[key] = sum(values)
    for key in ("trims", "nacks_sent", "duplicates"):
        values = [f[key] for f in flows if key in f]
        if values:
            out[key] = max(values)
    return out
