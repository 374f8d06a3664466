"""Exercise 6, plane failure: the student writes how an endpoint reacts to its own NIC port
going down or up (Endpoint.set_plane_up), how it tells its peers (Endpoint._send_port_status:
a PORT_STATUS EP_REQ to QP 0x2 carrying the mask of live ports, repeated until answered), and
how a peer reacts to the mask it receives (Endpoint._apply_peer_mask).

Stages: (1) unit checks on three sans-IO endpoints A, B and C with four planes, packets handed
over by this module (A is connected to B and to C): A's own sending, the notification each
peer gets, the peer's sending after it, the repeat of an unanswered notification, and the
plane's return; (2) the simulator: the receiver's NIC port on plane 0 dies mid-transfer and
comes back; (3) the live Mininet transfer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from grader.live import transfer_check
from grader.report import Check, not_run, raised
from grader.report import run_check as _run

PLANES = 4
DEAD = 1  # the plane A loses in the unit checks
QPN = {("A", "B"): 0x100, ("A", "C"): 0x101, ("B", "A"): 0x200, ("C", "A"): 0x300}
WRITE = 32 * 1024  # enough data packets to be sprayed over every usable plane


class Trio:
    """Endpoints A, B, C (four planes, two spines a plane); A talks to B and to C. Nothing is
    delivered unless a check hands it over, so each check sees exactly what was sent."""

    def __init__(self) -> None:
        from host_agent.core import Endpoint, EndpointConfig, EvConfig, PathInfo

        base = 10e-6
        ev = EvConfig.for_base_rtt(base, evs_per_connection=16, backups_per_plane=2,
                                   ev_min_active=4)
        cfg = EndpointConfig.for_base_rtt(base, ev=ev)
        self.retry = cfg.port_status_retry
        self.now = 1.0
        self.eps = {n: Endpoint(cfg, planes=PLANES, name=n, seed=i + 1)
                    for i, n in enumerate("ABC")}
        for (me, peer), qpn in QPN.items():
            paths = [PathInfo(p, (me, peer, p, s)) for p in range(PLANES) for s in range(2)]
            self.eps[me].connect(peer, qpn, QPN[(peer, me)], paths)
        self.events: dict[str, list[Any]] = {n: [] for n in self.eps}

    def send(self, name: str) -> list[Any]:
        out = self.eps[name].packets_to_send(now=self.now)
        while (event := self.eps[name].next_event()) is not None:
            self.events[name].append(event)
        return out

    def deliver(self, src: str, packets: list[Any]) -> None:
        from host_agent.core import RxMeta
        for tx in packets:
            self.eps[tx.peer].receive_packet(tx.payload, RxMeta(src, tx.plane, tx.ev, tx.dscp,
                                                                tx.ecn), now=self.now)

    def data_planes(self, src: str, dst: str) -> list[int]:
        """Planes of the data packets `src` sends for a fresh write to `dst`."""
        import wire
        mr = self.eps[dst].register_memory(WRITE)
        self.eps[src].post_write(QPN[(src, dst)], bytes(WRITE), mr.va, mr.rkey, now=self.now)
        return [tx.plane for tx in self.send(src)
                if tx.peer == dst and tx.payload[0] in wire.DATA_OPCODES]


def port_status(packets: list[Any], opcode: int) -> list[tuple[Any, int, int]]:
    """(peer, plane, mask) of each PORT_STATUS packet with `opcode` in `packets`."""
    import wire
    out = []
    for tx in packets:
        if tx.payload and tx.payload[0] == opcode:
            pkt = wire.decode_packet(tx.payload)
            out.append((tx.peer, tx.plane, pkt.status.port_mask))
    return out


def _planes(mask: int) -> str:
    return "{" + ", ".join(str(p) for p in range(PLANES) if mask >> p & 1) + "}"


ALIVE = [p for p in range(PLANES) if p != DEAD]
MASK_DOWN = sum(1 << p for p in ALIVE)
MASK_ALL = (1 << PLANES) - 1


def _local_check() -> Check:
    def body() -> str:
        from host_agent.core import PlaneStateChanged
        t = Trio()
        t.eps["A"].set_plane_up(DEAD, False, now=t.now)
        t.send("A")
        problems = []
        if not any(isinstance(e, PlaneStateChanged) and e.plane == DEAD and not e.up
                   for e in t.events["A"]):
            problems.append(f"no PlaneStateChanged({DEAD}, up=False) event")
        used = t.data_planes("A", "B")
        if DEAD in used or not used:
            problems.append(f"with plane {DEAD} down, A's data went on planes {sorted(set(used))}")
        t = Trio()  # a fresh pair: the first write's packets fill the window
        t.eps["A"].set_plane_up(DEAD, False, now=t.now)
        t.send("A")
        t.eps["A"].set_plane_up(DEAD, True, now=t.now)
        t.send("A")
        used = t.data_planes("A", "B")
        if DEAD not in used:
            problems.append(f"with plane {DEAD} up again, A's data went on planes "
                            f"{sorted(set(used))} only")
        return "; ".join(problems)
    return _run("ex6.local", "a local port down stops our own use of its plane; up resumes it",
                2, "set_plane_up records the new state, emits PlaneStateChanged and tells every "
                   "connection conn.set_plane_usable(plane, usable): usable only if our port is "
                   "up *and* the peer's is (plane in self._peer_up[conn.peer]); then "
                   "conn.drain_ev_changes()",
                f"down: a PlaneStateChanged event and no data on plane {DEAD}; up: data on "
                f"plane {DEAD} again", body)


def _notify_check() -> Check:
    import wire

    def body() -> str:
        t = Trio()
        t.eps["A"].set_plane_up(DEAD, False, now=t.now)
        sent = port_status(t.send("A"), wire.OP_EP_REQ)
        problems = []
        for peer in "BC":
            mine = [(plane, mask) for p, plane, mask in sent if p == peer]
            planes = sorted(plane for plane, _ in mine)
            if planes != ALIVE:
                problems.append(f"to {peer}: EP_REQ on planes {planes}")
            bad = {_planes(mask) for _, mask in mine if mask != MASK_DOWN}
            if bad:
                problems.append(f"to {peer}: port mask {', '.join(sorted(bad))}")
        return "; ".join(problems)
    return _run("ex6.notify", "each peer is told, on every surviving plane, which ports are up",
                3, "bump self._announce_seq (mod SEQ_MOD), build the mask of our live ports and "
                   "send a PortStatusPacket (opcode OP_EP_REQ, dest QP QPN_ENDPOINT, seq in the "
                   "BTH PSN and in the extension) to every peer, on each plane whose port is up "
                   "(conn.entry_on_plane(p) names an EV there, conn.control_tx builds the "
                   "packet): a notification sent on the dead plane itself never arrives",
                f"to B and to C: one EP_REQ on each of planes {ALIVE}, none on plane {DEAD}, "
                f"port mask {_planes(MASK_DOWN)}", body)


def _peer_down_check() -> Check:
    import wire

    def body() -> str:
        from host_agent.core import PeerPlaneChanged
        t = Trio()
        t.eps["A"].set_plane_up(DEAD, False, now=t.now)
        t.deliver("A", t.send("A"))
        problems = []
        replies = port_status(t.send("B"), wire.OP_EP_RSP)
        up = t.eps["B"].peer_planes_up("A")
        if up != set(ALIVE):
            problems.append(f"B believes A's ports {sorted(up)} are up")
        if not any(isinstance(e, PeerPlaneChanged) and e.plane == DEAD and not e.up
                   for e in t.events["B"]):
            problems.append(f"B emitted no PeerPlaneChanged('A', {DEAD}, up=False)")
        if not replies:
            problems.append("B sent no EP_RSP")
        used = t.data_planes("B", "A")
        if DEAD in used or not used:
            problems.append(f"B's data to A went on planes {sorted(set(used))}")
        return "; ".join(problems)
    return _run("ex6.peer-down", "the peer stops sending on the plane it was told is down", 3,
                "_apply_peer_mask stores the planes the mask says are up in "
                "self._peer_up[peer] and, for each plane whose state changed, emits "
                "PeerPlaneChanged and calls conn.set_plane_usable(plane, our port up and "
                "theirs up) then conn.drain_ev_changes() on every connection to that peer",
                f"B: peer_planes_up('A') == {ALIVE}, a PeerPlaneChanged event, an EP_RSP, "
                f"and no data on plane {DEAD}", body)


def _retry_check() -> Check:
    import wire

    def body() -> str:
        t = Trio()
        t.eps["A"].set_plane_up(DEAD, False, now=t.now)
        first = t.send("A")
        t.deliver("A", [tx for tx in first if tx.peer == "B"])  # C's copy is lost
        t.deliver("B", t.send("B"))  # B's EP_RSP reaches A
        t.send("C")
        timer = t.eps["A"].get_timer()
        problems = []
        if timer is None or timer > t.now + 1.5 * t.retry:
            problems.append(f"A's timer is {timer!r}, not about port_status_retry "
                            f"({t.retry:g} s) from now")
        t.now += 1.01 * t.retry
        t.eps["A"].handle_timer(now=t.now)
        again = port_status(t.send("A"), wire.OP_EP_REQ)
        to = sorted({peer for peer, _, _ in again})
        if to != ["C"]:
            problems.append(f"after port_status_retry A repeated its EP_REQ to {to or 'nobody'}")
        return "; ".join(problems)
    return _run("ex6.retry", "an unanswered notification is repeated, an answered one is not", 2,
                "after sending an EP_REQ, remember it until answered: "
                "self._pending_announce[peer] = (seq, mask, now + self.config.port_status_retry)"
                " (handle_timer repeats it, an EP_RSP with that seq clears it)",
                "A repeats its EP_REQ to C (whose copy was lost) after port_status_retry, and "
                "not to B (which answered)", body)


def _peer_up_check() -> Check:
    import wire

    def body() -> str:
        t = Trio()
        t.eps["A"].set_plane_up(DEAD, False, now=t.now)
        t.deliver("A", t.send("A"))
        t.send("B")
        t.now += 1e-3
        t.eps["A"].set_plane_up(DEAD, True, now=t.now)
        sent = t.send("A")
        problems = []
        masks = {_planes(mask) for peer, _, mask in port_status(sent, wire.OP_EP_REQ)
                 if peer == "B"}
        if masks != {_planes(MASK_ALL)}:
            problems.append(f"A's EP_REQ to B carried {sorted(masks) or 'nothing'}")
        t.deliver("A", sent)
        up = t.eps["B"].peer_planes_up("A")
        if up != set(range(PLANES)):
            problems.append(f"B believes A's ports {sorted(up)} are up")
        used = t.data_planes("B", "A")
        if DEAD not in used:
            problems.append(f"B's data to A went on planes {sorted(set(used))} only")
        return "; ".join(problems)
    return _run("ex6.peer-up", "when the port comes back, the peer uses the plane again", 3,
                "set_plane_up(plane, True) announces the new mask like a down does, and "
                "_apply_peer_mask must handle planes coming back (in the new mask, not in the "
                "old one) as well as planes going away: a plane never marked usable again "
                "costs 1/planes of the capacity for good",
                f"A announces {_planes(MASK_ALL)}; B then believes every port is up and sends "
                f"data on plane {DEAD} again", body)


# ----- stage 2: the simulator -----------------------------------------------------------------

SIM_FABRIC = {"planes": 4, "t0_per_plane": 2, "t1_per_plane": 2, "hosts_per_t0": 2}
SIM_BYTES = 4 * 1024 * 1024
FAIL_AT, HEAL_AT = 0.3, 0.6  # of the ideal transfer time
NOTIFY_BOUND_RTTS = 5  # the reference: about 0.4 base RTTs
QUIET_AFTER_RTTS = 1  # data already queued when the notification arrives may still leave


def simulate() -> dict[str, Any]:
    """The receiver's NIC port on plane 0 dies mid-transfer and comes back; figures of the
    sender's reaction."""
    from fabric.topology import Fabric
    from host_agent.core import PeerPlaneChanged
    from sim.harness import Harness, SimSettings

    fabric = Fabric(**SIM_FABRIC)
    h = Harness(fabric, SimSettings())
    src, dst, plane = 0, fabric.hosts - 1, 0
    h.add_transfer(src, dst, SIM_BYTES)
    rtt = h.base_rtt = h.path_rtt(src, dst)
    h.capacity_log.clear()
    h.note_capacity()
    ideal = SIM_BYTES * 8 / h.capacity_log[-1][1]
    sender = h.adapters[src]
    link = h.net.host_link(dst, plane)
    t_fail, t_heal = FAIL_AT * ideal, HEAL_AT * ideal
    marks: dict[str, Any] = {}

    def data() -> int:
        return sender.data_tx_per_plane[plane]

    def listen(now: float, adapter: Any, event: Any) -> None:
        if adapter is sender and isinstance(event, PeerPlaneChanged) and event.peer == dst \
                and event.plane == plane:
            key = "up_at" if event.up else "down_at"
            if key not in marks:
                marks[key] = now
                if not event.up:
                    h.loop.at(now + QUIET_AFTER_RTTS * rtt,
                              lambda: marks.setdefault("quiet_from", data()))

    def heal() -> None:
        marks["at_heal"] = data()
        h.net.set_link_up(link, True)
    h.listeners.append(listen)
    h.at(t_fail, lambda: h.net.set_link_up(link, False))
    h.at(t_heal, heal)
    h.start()
    finished = h.run(50 * ideal + 0.05)
    return {"ok": finished and h.verified(), "rtt": rtt, "t_fail": t_fail, "t_heal": t_heal,
            "marks": marks, "final": data(),
            "error": "" if finished else f"not finished after {h.loop.now * 1e3:.2f} ms"}


def _sim_checks() -> Iterator[Check]:
    title = "the simulated transfer completes across the plane failure and arrives intact"
    try:
        r = simulate()
    except Exception as exc:
        yield Check("ex6.sim.transfer", title, 2, False, expected="completed and verified",
                    observed=raised(exc),
                    hint="the traceback's last line shows where the simulation raised")
        return
    yield Check("ex6.sim.transfer", title, 2, r["ok"], expected="completed and verified",
                observed="completed and verified" if r["ok"] else r["error"] or "corrupt",
                hint="every unit check passed: look for a plane that never comes back or "
                     "data still sent where nobody listens")
    rtt, m = r["rtt"], r["marks"]
    down = m.get("down_at")
    yield Check(
        "ex6.sim.notified", f"the sender hears of the failure within {NOTIFY_BOUND_RTTS} "
        "base RTTs", 1, down is not None and (down - r["t_fail"]) / rtt <= NOTIFY_BOUND_RTTS,
        expected=f"PeerPlaneChanged(plane 0, up=False) at the sender within "
                 f"{NOTIFY_BOUND_RTTS} base RTTs of the failure",
        observed="never" if down is None else f"{(down - r['t_fail']) / rtt:.1f} base RTTs",
        hint="the receiver's set_plane_up must announce at once, on its surviving planes")
    after = None if "quiet_from" not in m or "at_heal" not in m else \
        m["at_heal"] - m["quiet_from"]
    yield Check(
        "ex6.sim.quiet", "no data goes to the dead plane once the notification is in", 2,
        after == 0,
        expected=f"0 data packets on plane 0 from {QUIET_AFTER_RTTS} base RTT after the "
                 f"notification until the heal",
        observed="no notification arrived" if after is None else f"{after} data packets",
        hint="on the notification, the sender's connections must stop choosing that plane's "
             "EVs (conn.set_plane_usable(plane, False))")
    up = m.get("up_at")
    resumed = r["final"] - m.get("at_heal", r["final"])
    yield Check(
        "ex6.sim.resume", "the plane carries data again once the port is back", 2,
        up is not None and resumed > 0,
        expected="PeerPlaneChanged(plane 0, up=True) at the sender and data on plane 0 after "
                 "the heal",
        observed=f"{'no' if up is None else 'an'} up notification; {resumed} data packets on "
                 f"plane 0 after the heal",
        hint="set_plane_up(plane, True) must announce the full mask, and the peer must mark "
             "the plane usable again")


SIM_IDS = (("ex6.sim.transfer", 2), ("ex6.sim.notified", 1), ("ex6.sim.quiet", 2),
           ("ex6.sim.resume", 2))
SIM_TITLE = "simulator: the receiver's port on plane 0 fails and returns mid-transfer"
LIVE_TITLE = "a write crosses a Mininet fabric with your port-status handling"


def grade(ctx: Any) -> Iterator[Check]:
    units = [_local_check(), _notify_check(), _peer_down_check(), _retry_check(),
             _peer_up_check()]
    yield from units
    if not all(c.passed for c in units):
        for check_id, points in SIM_IDS:
            yield not_run(check_id, SIM_TITLE, points, "fix the unit checks above first")
        yield not_run("live.transfer", LIVE_TITLE, 3, "fix the unit checks above first")
        return
    sims = list(_sim_checks())
    yield from sims
    done = {c.id for c in sims}
    for check_id, points in SIM_IDS:
        if check_id not in done:
            yield not_run(check_id, SIM_TITLE, points, "the simulation did not run to the end")
    if not all(c.passed for c in sims) or len(sims) < len(SIM_IDS):
        yield not_run("live.transfer", LIVE_TITLE, 3, "fix the simulator checks above first")
        return
    yield transfer_check(ctx, "live.transfer", 3,
                         hint="the unit and simulator checks pass, so look at the agents' "
                              "logs: did the agents start with your modules?")
