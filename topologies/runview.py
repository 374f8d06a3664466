"""What a run looked like, sampled while it runs: the data of the run report (runreport).

RunRecorder samples a running MrcNetwork every `period` (0.5 s: the live view's twice a
second) in a thread of its own:
- every link's packets/s in both directions, from the switch ports' kernel counters (a
  switch end's tx is its direction out, its rx the other one, so host links are covered by
  their T0 end);
- which links are down or cut (the fabric's link log);
- the sender's counters (retransmits, trims, NACKs, ECN marks, timeouts, EVs retired and
  reinstated) and the receiver's placed bytes (goodput);
- the state and tx packets of every EV of the sender's QP towards the receiver, when the
  agents run MRC.
A sample that cannot be taken (an agent restarting) is recorded as missing, with the reason,
never silently: the report shows the gap.

Cost grows with switch ports (two counter reads per switch per sample, through the node's
shell on another server) and with EVs (one per-EV stats call per sample).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from controller.tables import LinkKey, link_key
from fabric.topology import Fabric
from topologies.agents import AgentError
from topologies.netconfig import NetworkError

SAMPLE_PERIOD_S = 0.5
SENDER_COUNTERS = ("retransmits", "timeouts", "trims_received", "nacks_received",
                   "ecn_marks_received", "ev_retired", "ev_reinstated", "tx_data_packets")


def fabric_layout(fabric: Fabric) -> dict[str, Any]:
    """Nodes by plane and role, and every link with its two ends' ports: what the view draws."""
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
    """Samples `net` while a transfer src -> dst runs (module docstring)."""

    def __init__(self, net: Any, src: int, dst: int, period: float = SAMPLE_PERIOD_S) -> None:
        if not period > 0:
            raise ValueError(f"sample period must be > 0 s, got {period!r}")
        self._net, self._src, self._dst, self._period = net, src, dst, period
        self._layout = fabric_layout(net.fabric)
        self._ids = {link_key(lk["a"], lk["b"]): lk["id"] for lk in self._layout["links"]}
        self.samples: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self._last: tuple[float, dict[str, list[int]], int] | None = None
        self._qpn: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-recorder", daemon=True)

    def start(self) -> RunRecorder:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop sampling (idempotent); the recording: layout, samples and link events."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)
        return {**self.layout(), "samples": self.samples, "events": self.events()}

    def layout(self) -> dict[str, Any]:
        """What does not change during the run: the fabric, the period, the hosts."""
        return {"fabric": self._layout, "period_s": self._period, "src": self._src,
                "dst": self._dst, "events": []}

    def events(self) -> list[dict[str, Any]]:
        """The fabric's link events since sampling began, in seconds from then."""
        return [{"t": round(e["time"] - self.started, 3), "event": e["event"],
                 "a": e.get("a", ""), "b": e.get("b", "")}
                for e in list(self._net.link_log) if e.get("time", 0.0) >= self.started]

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            self.samples.append(self.sample())
            due += self._period  # on a fixed grid: the time a sample takes does not add up
            self._stop.wait(max(0.0, due - time.monotonic()))

    def sample(self) -> dict[str, Any]:
        """One sample now (also called by tests)."""
        try:
            counts = self._link_counts()
            stats = self._net.stats(self._src, per_ev=True)
            received = int(self._net.agent(self._dst).call("counters")["counters"]
                           ["rx_data_bytes"])
        except (NetworkError, AgentError) as exc:
            return {"t": round(time.monotonic() - self.started, 3), "missing": str(exc)}
        now = time.monotonic()  # after the reads: the link state below is as of now
        out: dict[str, Any] = {"t": round(now - self.started, 3), "down": sorted(self._down())}
        out["counters"] = {k: int(stats["endpoint"].get(k, 0)) for k in SENDER_COUNTERS}
        out["received_bytes"] = received
        out["evs"] = self._ev_states(stats)
        if self._last is not None:
            then, last_counts, last_received = self._last
            span = now - then
            out["pps"] = {lid: [round((c - p) / span, 1) for c, p in zip(v, last_counts[lid],
                                                                        strict=True)]
                          for lid, v in counts.items() if lid in last_counts}
            out["goodput_bps"] = round((received - last_received) * 8 / span, 1)
        self._last = (now, counts, received)
        return out

    def _link_counts(self) -> dict[str, list[int]]:
        """Packets each link carried so far, [a -> b, b -> a], from switch ends."""
        tx: dict[str, dict[int, int]] = {}
        rx: dict[str, dict[int, int]] = {}
        for sw in self._net.fabric.switches:
            tx[sw.name] = self._net.port_sent(sw.name)
            rx[sw.name] = self._net.port_received(sw.name)
        counts = {}
        for link in self._layout["links"]:
            a, b = link["a"], link["b"]
            if a in tx:
                counts[link["id"]] = [tx[a][link["a_port"]], rx[a][link["a_port"]]]
            else:  # a host: its switch end b sends b -> a
                counts[link["id"]] = [rx[b][link["b_port"]], tx[b][link["b_port"]]]
        return counts

    def _down(self) -> set[str]:
        """The ids of links whose last event in the log took them down or cut them (the
        log names a link's ends in either order)."""
        down: dict[LinkKey, bool] = {}
        for e in self._net.link_log:
            if e.get("event") in ("down", "cut", "up"):
                down[link_key(e["a"], e["b"])] = e["event"] != "up"
        return {self._ids[key] for key, is_down in down.items() if is_down and key in self._ids}

    def _ev_states(self, stats: dict[str, Any]) -> dict[str, list[Any]]:
        """EV -> [plane, route, state, tx packets] of the sender's QP towards dst (empty
        when the agents do not run MRC)."""
        per_qp = stats.get("per_ev") or {}
        if self._qpn is None:
            try:
                qps = self._net.agent(self._src).call("status")["qps"].get(str(self._dst))
            except AgentError:
                return {}
            if not qps or len(qps) != 1:
                return {}
            self._qpn = qps[0]
        evs = per_qp.get(f"{self._qpn:#x}", {})
        return {ev: [info["plane"], info["route"], info["state"], info["tx_packets"]]
                for ev, info in evs.items()}
