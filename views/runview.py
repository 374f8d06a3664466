"""What a run looked like, sampled while it runs: the data of the run report and live view.

RunRecorder samples a running MrcNetwork every `period` (0.5 s: the live view's twice a
second) in a thread of its own:
- every link's packets/s in both directions, from the switch ports' kernel counters (a
  switch end's tx is its direction out, its rx the other one, so host links are covered by
  their T0 end), all local ports in one read of /proc/net/dev;
- trims and ECN marks per link direction, from the switches' per-port P4 counters
  (p4rt.names.TRIM_COUNTER, ECN_MARK_COUNTER) over the controller's P4Runtime sessions. A
  queue builds only behind a port that sends at its full rate, so only ports that sent at
  least SATURATED of the port rate are read (every port when the rate is not set, and in a
  recording's first and last sample), and only in a sample where the flows' receivers
  counted new trims or ECN marks: a loaded fabric that does not trim costs no Read at all
  (docs/decisions.md);
- which links are down or cut (the fabric's link log);
- the focus sender's counters (retransmits, trims, NACKs, ECN marks, timeouts, EVs retired
  and reinstated) and the bytes the flows' receivers placed (goodput);
- the state and tx packets of every EV of the focus sender's QP, when the agents run MRC
  (the agent's `view` command: counters and EVs, a fraction of `stats`).
A sample that cannot be taken (an agent restarting) is recorded as missing, with the reason,
never silently: the page shows the gap.

Samples are compact (the report of a bench scenario holds thousands): link rates are a list
in the layout's link order, marks only for the links that had any, an EV's plane and route
once per recording. Cost grows with switch ports (one /proc read, a Read per saturated
switch), with the flows' receivers (a counters call each) and with EVs (one per-EV call).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from controller.tables import LinkKey, link_key
from emulation.agents import AgentError
from emulation.netconfig import NetworkError
from fabric.topology import Fabric
from p4rt.names import ECN_MARK_COUNTER, TRIM_COUNTER

SAMPLE_PERIOD_S = 0.5
SATURATED = 0.8  # of the port rate: a port sending this fast may be queueing (module doc)
MARK_COUNTERS = (TRIM_COUNTER, ECN_MARK_COUNTER)
SENDER_COUNTERS = ("retransmits", "timeouts", "trims_received", "nacks_received",
                   "ecn_marks_received", "ev_retired", "ev_reinstated", "tx_data_packets")


def fabric_layout(fabric: Fabric) -> dict[str, Any]:
    """Nodes by plane and role, and every link with its two ends' ports: what the view draws.
    A sample's link rates follow the order of `links`."""
    planes = []
    for p in range(fabric.planes):
        planes.append({
            "plane": p,
            "t1": [fabric.t1(p, i).name for i in range(fabric.t1_per_plane)],
            "t0": [fabric.t0(p, i).name for i in range(fabric.t0_per_plane)],
        })
    links = [{"id": link_id(c.a, c.b), "a": c.a, "a_port": c.a_port, "b": c.b,
              "b_port": c.b_port} for c in fabric.links]
    hosts = [fabric.host_name(h) for h in range(fabric.hosts)]
    return {"planes": planes, "hosts": hosts, "links": links,
            "nic_t0": {fabric.host_name(h): [fabric.t0(p, fabric.nic(h, p).t0).name
                                             for p in range(fabric.planes)]
                       for h in range(fabric.hosts)}}


def link_id(a: str, b: str) -> str:
    return f"{a}|{b}"


class RunRecorder:
    """Samples `net` while `flows` (src, dst) run; the first is the focus (module doc).
    `goodput`: whether the flows' bytes are the agents' (not kernel TCP's)."""

    def __init__(self, net: Any, flows: list[tuple[int, int]], *, name: str = "",
                 capacity_bps: float | None = None, goodput: bool = True,
                 period: float = SAMPLE_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not period > 0:
            raise ValueError(f"sample period must be > 0 s, got {period!r}")
        if not flows:
            raise ValueError("a recording follows at least one flow (src, dst)")
        self._net, self._flows, self._period, self._clock = net, list(flows), period, clock
        self._src, self._dst = self._flows[0]
        self._receivers = sorted({d for _, d in self._flows}) if goodput else []
        self._head = {"name": name, "period_s": period, "src": self._src, "dst": self._dst,
                      "flows": [list(f) for f in self._flows], "capacity_bps": capacity_bps,
                      "goodput": goodput, "fabric": fabric_layout(net.fabric), "evs": {}}
        links = self._head["fabric"]["links"]
        self._ids = {link_key(lk["a"], lk["b"]): lk["id"] for lk in links}
        switches = net.fabric.by_name
        self._ends = _link_ends(links, switches)
        self._egress = [tuple((sw, port) if sw in switches else None
                              for sw, port in ((lk["a"], lk["a_port"]), (lk["b"], lk["b_port"])))
                        for lk in links]  # where each direction queues, and may be trimmed
        rate = net.config.port_rate_pps
        self._busy_pps = SATURATED * rate if isinstance(rate, int) else None
        self.samples: list[dict[str, Any]] = []
        self.cpu_s = 0.0  # this process's CPU spent sampling (bench.costs.view_cost)
        self.started = clock()
        self._last: tuple[float, dict[str, dict[int, tuple[int, int]]], int, int] | None = None
        self._marks: dict[tuple[str, int], tuple[float, int, int]] = {}
        self._need_paths = True  # the next `view` also carries each EV's plane and route
        self._qpn: int | None = None  # the focus QP whose EVs the recording holds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-recorder", daemon=True)

    def start(self) -> RunRecorder:
        self.started = self._clock()
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop sampling with a last sample (idempotent): a run shorter than the period still
        has its start and its end. The recording: layout, samples and link events."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(10.0)
            self.samples.append(self.sample(last=True))
        self._stop.set()
        return {**self.layout(), "samples": self.samples, "events": self.events(),
                "sampler_cpu_s": round(self.cpu_s, 3)}

    def layout(self) -> dict[str, Any]:
        """The recording without its samples: the fabric, the flows, the EVs seen so far."""
        return {**self._head, "evs": dict(self._head["evs"]), "samples": [], "events": []}

    def events(self) -> list[dict[str, Any]]:
        """The fabric's link events since sampling began, in seconds from then."""
        return [{"t": round(e["time"] - self.started, 3), "event": e["event"],
                 "a": e.get("a", ""), "b": e.get("b", "")}
                for e in list(self._net.link_log) if e.get("time", 0.0) >= self.started]

    def _run(self) -> None:
        due = self._clock()
        while not self._stop.is_set():
            self.samples.append(self.sample())
            due += self._period  # on a fixed grid: the time a sample takes does not add up
            self._stop.wait(max(0.0, due - self._clock()))

    def sample(self, last: bool = False) -> dict[str, Any]:
        """One sample now (also called by tests). The first and the `last` read the marks of
        every port: a baseline for all, and a run's every trim counted by its end."""
        began = time.thread_time()
        try:
            return self._sample(last)
        finally:
            self.cpu_s += time.thread_time() - began

    def _sample(self, last: bool) -> dict[str, Any]:
        try:
            counts = self._net.switch_packet_counts()
            agent = self._net.agent(self._src)
            view = agent.call("view", peer=self._dst, paths=self._need_paths)
            if view.get("qpn") not in (None, self._qpn) and not self._need_paths:
                # a fresh QP (the bench opens one per run): its routes now, not a sample later
                view = agent.call("view", peer=self._dst, paths=True)
            received, marked = self._receiver_totals({self._src: view["counters"]})
        except (NetworkError, AgentError) as exc:
            return {"t": round(self._clock() - self.started, 3), "missing": str(exc)}
        now = self._clock()  # after the reads: the link state below is as of now
        out: dict[str, Any] = {"t": round(now - self.started, 3), "down": sorted(self._down())}
        out["counters"] = {k: int(view["counters"].get(k, 0)) for k in SENDER_COUNTERS}
        out["evs"] = self._ev_states(view.get("qpn"), view["evs"])
        if self._last is not None:
            then, last_counts, last_received, last_marked = self._last
            span = now - then
            out["pps"] = [[round(max(0.0, _rate(counts, last_counts, end, span)))
                           for end in ends] for ends in self._ends]
            # marks are read only when a receiver saw trims or ECN marks since the last
            # sample (or nobody's counters say: kernel flows), and at the end of the run
            if last or not self._receivers or marked > last_marked:
                port_pps = {sw: {p: (tx - last_counts[sw][p][TX]) / span
                                 for p, (_, tx) in ports.items() if p in last_counts.get(sw, {})}
                            for sw, ports in counts.items()}
                marks = self._mark_rates(port_pps, now, since=then, every=last)
                if marks:
                    out["marks"] = marks
            if self._receivers:
                out["goodput_bps"] = round((received - last_received) * 8 / span, 1)
        else:
            self._mark_rates({sw: dict.fromkeys(ports, 0.0) for sw, ports in counts.items()},
                             now, since=now, every=True)
        self._last = (now, counts, received, marked)
        return out

    def _receiver_totals(self, known: dict[int, dict[str, int]]) -> tuple[int, int]:
        """(data bytes placed, trims + ECN marks seen) over the flows' receivers; `known`:
        counters already read this sample (the focus sender's, often a receiver too)."""
        received = marked = 0
        for d in self._receivers:
            counters = known[d] if d in known else self._net.agent(d).call("counters")[
                "counters"]
            received += int(counters["rx_data_bytes"])
            marked += int(counters.get("trims_received", 0))
            marked += int(counters.get("ecn_marks_received", 0))
        return received, marked

    def _mark_rates(self, port_pps: dict[str, dict[int, float]], now: float, since: float,
                    every: bool = False) -> dict[str, list[float]]:
        """Link index -> [trims a->b, trims b->a, ECN a->b, ECN b->a] per second, for the
        links that had any; only busy ports are read, unless `every` (module docstring).
        Marks read now arose after `since` (the receivers saw none before), so a port read
        long ago has its rate over the last sample's span, not diluted over its own."""
        per_port: dict[tuple[str, int], tuple[float, float]] = {}
        for sw, ports in port_pps.items():
            busy = [p for p, pps in ports.items()
                    if every or self._busy_pps is None or pps >= self._busy_pps]
            if not busy:
                continue
            try:
                cells = self._net.switch_counters(sw, MARK_COUNTERS, busy)
            except NetworkError:
                continue  # a switch rebooting: its marks are unknown this sample
            for p in busy:
                trims, ecn = cells[TRIM_COUNTER][p], cells[ECN_MARK_COUNTER][p]
                last = self._marks.get((sw, p))
                self._marks[(sw, p)] = (now, trims, ecn)
                if last is not None and (trims > last[1] or ecn > last[2]):
                    span = now - max(last[0], since) if now > since else now - last[0]
                    per_port[(sw, p)] = ((trims - last[1]) / span, (ecn - last[2]) / span)
        out = {}
        for i, egress in enumerate(self._egress):
            got = [per_port.get(end) if end is not None else None for end in egress]
            if any(got):
                pairs = [g or (0.0, 0.0) for g in got]
                out[str(i)] = [round(pairs[0][0], 1), round(pairs[1][0], 1),
                               round(pairs[0][1], 1), round(pairs[1][1], 1)]
        return out

    def _down(self) -> set[str]:
        """The ids of links whose last event in the log took them down or cut them (the
        log names a link's ends in either order)."""
        down: dict[LinkKey, bool] = {}
        for e in self._net.link_log:
            if e.get("event") in ("down", "cut", "up"):
                down[link_key(e["a"], e["b"])] = e["event"] != "up"
        return {self._ids[key] for key, is_down in down.items() if is_down and key in self._ids}

    def _ev_states(self, qpn: int | None, evs: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """EV -> [state, tx packets] of the focus sender's QP (the agent's `view`); each EV's
        [plane, route] goes into the recording's `evs` once: asked for again only when EVs
        the recording has not seen appear. A new QP (the bench opens fresh ones per run)
        replaces the old one's EVs, in the table and in the samples taken before it: the
        grid shows the QP that carried the run."""
        if qpn is not None and qpn != self._qpn:
            if self._qpn is not None:
                self._head["evs"] = {}
                for old in self.samples:
                    old.pop("evs", None)
            self._qpn = qpn
        known = self._head["evs"]
        for ev, info in evs.items():
            if len(info) == 4:
                known.setdefault(ev, [info[2], info[3]])
        self._need_paths = any(ev not in known for ev in evs)
        return {ev: info[:2] for ev, info in evs.items()}


RX, TX = 0, 1  # a port's (rx, tx) packets, as switch_packet_counts gives them


def _link_ends(links: list[dict[str, Any]], switches: Any
               ) -> list[tuple[tuple[str, int, int], ...]]:
    """Per link, where its two directions a -> b and b -> a are counted: (switch, port, RX or
    TX). A switch end's tx is its direction out; a host's direction out is its T0 end's rx."""
    ends = []
    for link in links:
        a, b = link["a"], link["b"]
        if a in switches:
            ends.append(((a, link["a_port"], TX), (a, link["a_port"], RX)))
        else:
            ends.append(((b, link["b_port"], RX), (b, link["b_port"], TX)))
    return ends


def _rate(counts: dict[str, dict[int, tuple[int, int]]],
          last: dict[str, dict[int, tuple[int, int]]], end: tuple[str, int, int],
          span: float) -> float:
    sw, port, k = end
    try:
        return (counts[sw][port][k] - last[sw][port][k]) / span
    except KeyError:
        return 0.0
