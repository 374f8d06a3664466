"""In-flight packet records and per-path loss detection for the sender.

Why per path: a sprayed connection reorders packets across paths whose queueing delays differ
by several base RTTs (one congested spine), so "a packet sent later was acknowledged" says
nothing about loss unless both took the same route. A source route, however, is a FIFO: the
fabric does not hash an SRv6 path and data frames of one route share one queue per hop.

Why only a plane's own answers count as evidence for its paths: answers reach the sender
through one NIC per plane, each plane's in arrival order, but a host drains its NICs one after
the other, so after a pause it judges one plane's fresh answers (and the SACK bitmaps and
cumulative acks in them, which report deliveries on every plane) while older answers of the
other planes still wait in their queues. So the sender reports a delivery to this detector
only when the answer that told it came in on the packet's plane (a packet acknowledged
through another plane still leaves flight; it is just no evidence), and rule B compares a
packet with later transmissions of its own plane. What was measured that led here:
docs/decisions.md, "Loss detection judges a path by its own plane's answers".

A packet P in flight on path X is declared lost when either rule holds:
  A (RACK on X): a transmission sent on X after P was delivered, and P has been out longer
    than that transmission's RTT + the reorder window (the window absorbs SACKs overtaking
    each other on different reverse paths).
  B (X went silent): a transmission of X's plane sent `reorder_threshold` or more
    transmissions after P was delivered, P has been out longer than the reorder window plus
    the larger of the largest recent RTT seen on X and the RTT of the newest-sent transmission
    delivered on X's plane (RACK's RTT: a queue that every path of the plane shares, or the
    sender's own lateness in reading answers, delays the evidence as much as P; until X has an
    RTT sample: the caller's fallback, the RTO), and nothing sent on X has been delivered for a
    reorder window. Rule B is what notices a dead path within about two RTTs. A path whose
    queue is merely growing keeps delivering what was sent on it before P, so the silence
    condition keeps rule B quiet there even when P's RTT exceeds every earlier sample; a first
    window that leaves at once (every packet sent at one time) queues without any of its
    packets being overdue against another.
Only transmissions whose delivery is unambiguous feed the rules: first transmissions, and a
retransmitted packet's transmission named by the EV echoed in the SACK it triggered.

Dark paths: rule B declaring DARK_PATH_LOSSES packets of path X lost with no delivery on X in
between means X itself is dead, not one packet unlucky (a random loss is followed by later
deliveries on X, which rule A judges). detect() reports such paths so the sender can retire
every EV on X at once instead of one per loss (why: docs/decisions.md, "Dark paths").

Memory is O(packets in flight): each path indexes its in-flight packets in send order, and a
packet leaves the index when it is acknowledged, declared lost or resent (forget()).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field

from host_agent.core.types import PathInfo

_RTT_MAX_DECAY = 0.999  # per sample on a path: its remembered maximum halves in ~700 samples
DARK_PATH_LOSSES = 2  # rule-B losses on a path, no delivery between, that make it dark


@dataclass(slots=True)
class Write:
    wr_id: int
    data: bytes
    remote_va: int
    rkey: int
    imm: int | None
    msn: int
    posted_at: float
    next_offset: int = 0
    started: bool = False
    last_psn: int | None = None


@dataclass(eq=False, slots=True)
class OutPkt:
    psn: int
    write: Write
    offset: int
    length: int
    opcode: int
    ev: int = 0
    path: PathInfo | None = None
    sent_time: float = 0.0
    tx_seq: int = 0
    tx_count: int = 0
    in_flight: bool = False
    prev_ev: int | None = None  # EV and send time of the transmission before the latest one
    prev_sent_time: float = 0.0
    prev_path: PathInfo | None = None
    expired_evs: list[int] | None = None  # EVs of transmissions the RTO expired, unanswered
    # every EV it was sent on -> snd_una when first sent on it: an answer must echo one of
    # these EVs to be believed, and its cumulative ack cannot be older (Sender._answered)
    una_by_ev: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class _PathState:
    order: int  # when the path was first seen: detect() reports in this order
    queue: OrderedDict[int, OutPkt] = field(default_factory=OrderedDict)  # by tx_seq
    rack_seq: int = -1  # newest-sent delivered transmission on this path...
    rack_rtt: float = 0.0  # ...and its RTT
    rtt_max: float = 0.0  # decaying maximum RTT sample on this path
    last_delivery: float = 0.0  # when a transmission on this path was last found delivered
    silent_losses: int = 0  # rule-B losses since the path's last delivery
    busy: bool = False  # something was still in flight on the path at its last delivery
    max_pause: float = 0.0  # longest wait between deliveries while the path stayed busy
    heaped: int = -1  # the head tx_seq last put on its plane's heap (no duplicates)


class LossDetector:
    """Rules A and B of the module docstring, evaluated path by path.

    Why it keeps a watch list: a connection sprayed over hundreds of paths gets a SACK per
    packet, and looking at every path on each one cost more than the rest of the SACK's
    handling (docs/decisions.md, "Loss detection looks only at watched paths"). A rule can
    only apply to a path's oldest packet in flight (its head) once a later transmission on
    the path was delivered (rule A) or the plane's newest delivery is `reorder_threshold`
    transmissions past it (rule B); both only grow until the head changes. So detect()
    evaluates just the watched paths, whose head a rule applies to; a path is re-judged when
    its head or its own deliveries change (`_dirty`), and a plane's unwatched heads wait on a
    heap ordered by tx_seq until the plane's newest delivery passes them."""

    def __init__(self, reorder_threshold: int) -> None:
        self._threshold = reorder_threshold
        self._paths: dict[PathInfo, _PathState] = {}
        # per plane: the newest-sent transmission known delivered and its RTT (rule B)
        self._planes: dict[int, tuple[int, float]] = {}
        self._watched: dict[PathInfo, _PathState] = {}
        self._dirty: set[PathInfo] = set()
        self._heads: dict[int, list[tuple[int, int, PathInfo]]] = {}  # plane -> heap

    def _state(self, path: PathInfo) -> _PathState:
        state = self._paths.get(path)
        if state is None:
            state = self._paths[path] = _PathState(len(self._paths))
        return state

    def sent(self, pkt: OutPkt) -> None:
        path = pkt.path
        assert path is not None
        queue = (self._paths.get(path) or self._state(path)).queue
        if not queue:
            self._dirty.add(path)
        queue[pkt.tx_seq] = pkt

    def forget(self, pkt: OutPkt) -> None:
        """`pkt`'s latest transmission is no longer in flight."""
        path = pkt.path
        assert path is not None
        queue = self._paths[path].queue
        if next(iter(queue)) == pkt.tx_seq:
            self._dirty.add(path)
        del queue[pkt.tx_seq]

    def delivered(self, path: PathInfo, tx_seq: int, rtt: float, now: float) -> None:
        """An unambiguous transmission on `path`, sent `rtt` seconds ago, arrived, as told by
        an answer that came in on `path`'s plane (module docstring)."""
        state = self._paths.get(path) or self._state(path)
        state.silent_losses = 0
        if now > state.last_delivery:
            if state.busy and now - state.last_delivery > state.max_pause:
                state.max_pause = now - state.last_delivery
            state.last_delivery = now
        state.busy = bool(state.queue)
        if tx_seq > state.rack_seq:
            state.rack_seq, state.rack_rtt = tx_seq, rtt
            self._dirty.add(path)
        decayed = state.rtt_max * _RTT_MAX_DECAY
        state.rtt_max = rtt if rtt > decayed else decayed  # max(rtt, decayed)
        newest = self._planes.get(path.plane)
        if newest is None or tx_seq > newest[0]:
            self._planes[path.plane] = (tx_seq, rtt)

    def max_pauses(self) -> dict[PathInfo, float]:
        """Per path, the longest wait between two deliveries while it had packets in flight:
        the silence rule B must not mistake for a dead path (docs/benchmarks.md, "BMv2
        jitter")."""
        return {path: state.max_pause for path, state in self._paths.items()}

    def _update_watch(self) -> None:
        """Watch the paths whose head a rule now applies to; heap the other heads."""
        planes, watched, threshold = self._planes, self._watched, self._threshold
        for path in self._dirty:
            state = self._paths[path]
            if not state.queue:
                watched.pop(path, None)
                continue
            head = next(iter(state.queue))
            if head < state.rack_seq or head <= planes.get(path.plane, (-1,))[0] - threshold:
                watched[path] = state
                continue
            watched.pop(path, None)
            if state.heaped != head:
                state.heaped = head
                heapq.heappush(self._heads.setdefault(path.plane, []),
                               (head, state.order, path))
        self._dirty.clear()
        for plane, heap in self._heads.items():
            below = planes.get(plane, (-1,))[0] - threshold
            while heap and heap[0][0] <= below:
                head, _, path = heapq.heappop(heap)
                state = self._paths[path]
                if state.queue and next(iter(state.queue)) == head:
                    watched[path] = state

    def detect(
        self, now: float, reorder_window: float, fallback_patience: float
    ) -> tuple[list[OutPkt], float | None, list[PathInfo]]:
        """Packets lost by now (each at most once), when to look again if some may be, and the
        paths that went dark (module docstring)."""
        self._update_watch()
        lost: list[OutPkt] = []
        dark: list[PathInfo] = []
        recheck: float | None = None
        watched = self._watched.items()
        if len(self._watched) > 1:
            watched = sorted(watched, key=lambda item: item[1].order)
        for path, state in watched:
            newest = self._planes.get(path.plane, (-1, 0.0))
            rule_b_below = newest[0] - self._threshold  # rule B needs tx_seq <= this
            for pkt in state.queue.values():
                if pkt.tx_seq >= state.rack_seq and pkt.tx_seq > rule_b_below:
                    break  # neither rule applies (_due would say None): nor to later ones
                due, silent = self._due(state, newest, pkt, reorder_window, fallback_patience)
                if due is None:
                    break  # neither rule applies, nor to anything sent later on this path
                if now < due:
                    recheck = due if recheck is None else min(recheck, due)
                    break
                lost.append(pkt)
                if silent:
                    state.silent_losses += 1
                    if state.silent_losses >= DARK_PATH_LOSSES:
                        dark.append(path)
                        state.silent_losses = 0
        return lost, recheck, dark

    def _due(
        self, state: _PathState, newest: tuple[int, float], pkt: OutPkt, reorder_window: float,
        fallback: float,
    ) -> tuple[float | None, bool]:
        """When `pkt` is lost, and whether by rule B alone (nothing sent later on its path
        was delivered). `newest`: the plane's newest-sent delivered transmission and its RTT."""
        rack: float | None = None
        if pkt.tx_seq < state.rack_seq:
            rack = pkt.sent_time + state.rack_rtt + reorder_window
        plane_seq, plane_rtt = newest
        if plane_seq - self._threshold >= pkt.tx_seq:
            if state.rtt_max:
                overdue = pkt.sent_time + max(state.rtt_max, plane_rtt)
                silent = max(overdue, state.last_delivery) + reorder_window
            else:
                silent = pkt.sent_time + fallback
            if rack is None or silent < rack:
                return silent, rack is None
        return rack, False
