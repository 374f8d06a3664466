"""Exercise 6's sandboxed half: the scripted scenarios that run the student's endpoint, and
what each one saw, as plain JSON data (rubrics.ex6 judges it in the trusted process).

Every scenario returns raw observations only (which planes data went on, the PORT_STATUS
packets sent with their masks, the plane events, the timer, the peer's belief) or
{"raised": text} when the student's code raised, never a verdict: the judge compares them with
what the reference does, so a forged report has to hold what a correct endpoint really sends.
The student's modules are imported inside the functions, never at import time, so the trusted
grader can import this module for its constants without importing any submission.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.challenge import rng
from grader.report import raised

PLANES = 4
DEAD = 1  # the plane A loses in the unit checks of a run without a challenge (dead_plane)
QPN = {("A", "B"): 0x100, ("A", "C"): 0x101, ("B", "A"): 0x200, ("C", "A"): 0x300}
WRITE = 32 * 1024  # enough data packets to be sprayed over every usable plane
BASE_RTT = 10e-6  # the unit endpoints' RTT hint
RETRY_S = 4 * BASE_RTT  # EndpointConfig.for_base_rtt(BASE_RTT).port_status_retry
NOW = 1.0  # the unit scenarios' clock at the start
MAX_EVENTS = 256  # plane events kept per endpoint: far above what any scenario emits

SIM_FABRIC = {"planes": 4, "t0_per_plane": 2, "t1_per_plane": 2, "hosts_per_t0": 2}
SIM_BYTES = 4 * 1024 * 1024
FAIL_AT, HEAL_AT = 0.3, 0.6  # of the ideal transfer time
QUIET_AFTER_RTTS = 1  # data already queued when the notification arrives may still leave

Record = list[Any]  # [peer, plane, port mask] of one PORT_STATUS packet


class Trio:
    """Endpoints A, B, C (four planes, two spines a plane); A talks to B and to C. Nothing is
    delivered unless a scenario hands it over, so each one sees exactly what was sent."""

    def __init__(self, dead: int = DEAD) -> None:
        from host_agent.core import Endpoint, EndpointConfig, EvConfig, PathInfo

        self.dead = dead
        ev = EvConfig.for_base_rtt(BASE_RTT, evs_per_connection=16, backups_per_plane=2,
                                   ev_min_active=4)
        cfg = EndpointConfig.for_base_rtt(BASE_RTT, ev=ev)
        self.retry = cfg.port_status_retry
        self.now = NOW
        self.eps = {n: Endpoint(cfg, planes=PLANES, name=n, seed=i + 1)
                    for i, n in enumerate("ABC")}
        for (me, peer), qpn in QPN.items():
            paths = [PathInfo(p, (me, peer, p, s)) for p in range(PLANES) for s in range(2)]
            self.eps[me].connect(peer, qpn, QPN[(peer, me)], paths)
        self.events: dict[str, list[dict[str, Any]]] = {n: [] for n in self.eps}

    def send(self, name: str) -> list[Any]:
        """What `name` sends now; its plane events are kept (as data) in self.events."""
        from host_agent.core import PeerPlaneChanged, PlaneStateChanged
        out = self.eps[name].packets_to_send(now=self.now)
        while (event := self.eps[name].next_event()) is not None:
            kept = self.events[name]
            if isinstance(event, (PlaneStateChanged, PeerPlaneChanged)) \
                    and len(kept) < MAX_EVENTS:
                kept.append({"type": type(event).__name__, "plane": _plain(event.plane),
                             "up": bool(event.up),
                             "peer": _plain(getattr(event, "peer", None))})
        return out

    def deliver(self, src: str, packets: list[Any]) -> None:
        from host_agent.core import RxMeta
        for tx in packets:
            self.eps[tx.peer].receive_packet(tx.payload, RxMeta(src, tx.plane, tx.ev, tx.dscp,
                                                                tx.ecn), now=self.now)

    def data_planes(self, src: str, dst: str) -> list[Any]:
        """Planes of the data packets `src` sends for a fresh write to `dst`."""
        import wire
        mr = self.eps[dst].register_memory(WRITE)
        self.eps[src].post_write(QPN[(src, dst)], bytes(WRITE), mr.va, mr.rkey, now=self.now)
        return [_plain(tx.plane) for tx in self.send(src)
                if tx.peer == dst and tx.payload[0] in wire.DATA_OPCODES]


def _plain(value: Any) -> Any:
    """`value` if JSON carries it as is, else its repr: the judge sees what the code gave."""
    return value if value is None or isinstance(value, (int, float, str)) else repr(value)


def port_status(packets: list[Any], opcode: int) -> list[Record]:
    """[peer, plane, mask] of each PORT_STATUS packet with `opcode` in `packets`."""
    import wire
    out = []
    for tx in packets:
        if tx.payload and tx.payload[0] == opcode:
            pkt = wire.decode_packet(tx.payload)
            out.append([_plain(tx.peer), _plain(tx.plane), _plain(pkt.status.port_mask)])
    return out


def _down(t: Trio) -> None:
    t.eps["A"].set_plane_up(t.dead, False, now=t.now)


def local(dead: int) -> dict[str, Any]:
    """A's own port goes down (its events, its data's planes), then, afresh, down and up."""
    t = Trio(dead)
    _down(t)
    t.send("A")
    out: dict[str, Any] = {"events": list(t.events["A"]), "down_planes": t.data_planes("A", "B")}
    t = Trio(dead)  # a fresh pair: the first write's packets fill the window
    _down(t)
    t.send("A")
    t.eps["A"].set_plane_up(dead, True, now=t.now)
    t.send("A")
    out["up_planes"] = t.data_planes("A", "B")
    return out


def notify(dead: int) -> dict[str, Any]:
    """The EP_REQs A sends when its port goes down."""
    import wire
    t = Trio(dead)
    _down(t)
    return {"ep_req": port_status(t.send("A"), wire.OP_EP_REQ)}


def peer_down(dead: int) -> dict[str, Any]:
    """B after A's notification: its reply, its belief, its events, its data's planes."""
    import wire
    t = Trio(dead)
    _down(t)
    t.deliver("A", t.send("A"))
    replies = port_status(t.send("B"), wire.OP_EP_RSP)
    up = sorted(t.eps["B"].peer_planes_up("A"))
    return {"ep_rsp": replies, "peer_up": [_plain(p) for p in up],
            "events": list(t.events["B"]), "data_planes": t.data_planes("B", "A")}


def retry(dead: int) -> dict[str, Any]:
    """A's timer after B answered and C's copy was lost, and what A repeats when it fires."""
    import wire
    t = Trio(dead)
    _down(t)
    first = t.send("A")
    t.deliver("A", [tx for tx in first if tx.peer == "B"])  # C's copy is lost
    t.deliver("B", t.send("B"))  # B's EP_RSP reaches A
    t.send("C")
    timer = t.eps["A"].get_timer()
    t.now += 1.01 * t.retry
    t.eps["A"].handle_timer(now=t.now)
    return {"timer": _plain(timer), "ep_req": port_status(t.send("A"), wire.OP_EP_REQ)}


def peer_up(dead: int) -> dict[str, Any]:
    """A's port comes back: A's EP_REQs, then B's belief and B's data's planes."""
    import wire
    t = Trio(dead)
    _down(t)
    t.deliver("A", t.send("A"))
    t.send("B")
    t.now += 1e-3
    t.eps["A"].set_plane_up(dead, True, now=t.now)
    sent = t.send("A")
    out: dict[str, Any] = {"ep_req": port_status(sent, wire.OP_EP_REQ)}
    t.deliver("A", sent)
    out["peer_up"] = [_plain(p) for p in sorted(t.eps["B"].peer_planes_up("A"))]
    out["data_planes"] = t.data_planes("B", "A")
    return out


SCENARIOS: dict[str, Callable[[int], dict[str, Any]]] = {
    "local": local, "notify": notify, "peer_down": peer_down, "retry": retry,
    "peer_up": peer_up}


def attempt(scenario: Callable[[int], dict[str, Any]], dead: int) -> dict[str, Any]:
    """What `scenario` saw, or {"raised": text} if the student's code raised in it."""
    try:
        return scenario(dead)
    except Exception as exc:  # the student's code may raise anything: the judge reports it
        return {"raised": raised(exc)}


def dead_plane(challenge: str) -> int:
    """The plane A loses in one grading run's unit checks, drawn from its challenge: another
    run's records name another plane (three times in four)."""
    return rng(challenge, "ex6").randrange(PLANES)


def units(dead: int = DEAD) -> dict[str, dict[str, Any]]:
    return {name: attempt(scenario, dead) for name, scenario in SCENARIOS.items()}


def simulate(endpoints: Any = None) -> dict[str, Any]:
    """The receiver's NIC port on plane 0 dies mid-transfer and comes back; figures of the
    sender's reaction (times in s, counts of the sender's data packets on plane 0). Run by
    the grader (rubrics.ex6.measure) with `endpoints` served from the sandbox (None:
    this process's own, for tests): every figure is what the simulated fabric carried, never
    an endpoint's word. The sender counts as told when the receiver's PORT_STATUS request
    saying so reaches its NIC."""
    import wire
    from fabric.topology import Fabric
    from sim.harness import Harness, SimSettings

    fabric = Fabric(**SIM_FABRIC)
    h = Harness(fabric, SimSettings())
    h.endpoints = endpoints
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

    def told(up: bool) -> None:
        key = "up_at" if up else "down_at"
        if key in marks or h.loop.now < (t_heal if up else t_fail):
            return
        marks[key] = h.loop.now
        if not up:
            h.loop.at(h.loop.now + QUIET_AFTER_RTTS * rtt,
                      lambda: marks.setdefault("quiet_from", data()))

    honest_on_frame = sender.on_frame

    def on_frame(nic: int, frame: bytes) -> None:
        try:
            pkt = wire.decode_packet(wire.decode_frame_fields(frame)[4])
        except wire.WireError:
            pkt = None
        if isinstance(pkt, wire.PortStatusPacket) and pkt.bth.opcode == wire.OP_EP_REQ:
            told(bool(pkt.status.port_mask >> plane & 1))
        honest_on_frame(nic, frame)
    sender.on_frame = on_frame  # type: ignore[method-assign]

    def heal() -> None:
        marks["at_heal"] = data()
        h.net.set_link_up(link, True)
    h.at(t_fail, lambda: h.net.set_link_up(link, False))
    h.at(t_heal, heal)
    h.start()
    finished = h.run(50 * ideal + 0.05)
    return {"finished": finished, "verified": h.verified(), "end": h.loop.now, "rtt": rtt,
            "t_fail": t_fail, "t_heal": t_heal, "marks": marks, "final": data()}
