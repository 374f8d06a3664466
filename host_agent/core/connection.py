"""One QP pair: its EV set, congestion controller, sender and receiver halves, and probes."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Hashable, Sequence

import wire
from host_agent.core.config import EndpointConfig, RecoveryMode
from host_agent.core.errors import RemoteProtocolError
from host_agent.core.events import Event, EvStateChanged
from host_agent.core.evs import INDEX_BITS, EvSet
from host_agent.core.evstate import EvEntry
from host_agent.core.memory import MemoryTable
from host_agent.core.receiver import Receiver
from host_agent.core.sender import Sender
from host_agent.core.types import EvState, PathInfo, RxMeta, TxPacket


class Connection:
    def __init__(
        self,
        *,
        config: EndpointConfig,
        peer: Hashable,
        local_qpn: int,
        remote_qpn: int,
        paths: Sequence[PathInfo],
        rng: random.Random,
        ev_tag: int,
        memory: MemoryTable,
        stats: dict[str, int],
        emit: Callable[[Event], None],
        initial_psn: int,
        expected_psn: int,
    ) -> None:
        self.peer = peer
        self.local_qpn = local_qpn
        self.remote_qpn = remote_qpn
        self._stats = stats
        self._emit = emit
        self.evs = EvSet(paths, config.ev, rng, tag=ev_tag)
        self.cc = config.cc_factory()
        self.sender = Sender(config=config, evs=self.evs, cc=self.cc, peer=peer,
                             local_qpn=local_qpn, remote_qpn=remote_qpn, initial_psn=initial_psn,
                             stats=stats, emit=emit)
        self.receiver = Receiver(window=config.window, memory=memory, local_qpn=local_qpn,
                                 remote_qpn=remote_qpn, expected_psn=expected_psn, stats=stats,
                                 emit=emit,
                                 in_order=config.recovery is RecoveryMode.GO_BACK_N)
        self.tx_per_ev: Counter[int] = Counter()
        self.peer_tag: int | None = None  # the tag of the peer's EVs, once an answer proved it
        self._probe_seq = 0
        self._plane_cursor: Counter[int] = Counter()
        self.planes = tuple(sorted({p.plane for p in paths}))

    # ---- input -------------------------------------------------------------------------------

    def on_data(self, fields: wire.DataFields, meta: RxMeta, now: float,
                out: list[TxPacket]) -> None:
        """Process one data packet (wire.decode_data_fields) addressed to this QP; raise
        RemoteProtocolError if invalid."""
        peer, plane, ev, dscp, ecn = meta
        if peer != self.peer:
            self._wrong_peer(peer)
        if ecn == wire.ECN_CE:
            self._stats["ecn_marks_received"] += 1
        self._control(self.receiver.on_data(fields, dscp, ecn, ev), now, out, plane, ev)
        if self.evs._changes:  # (drain_changes would hand back an empty list)
            self.drain_ev_changes()

    def on_sack(self, fields: wire.SackFields, meta: RxMeta, now: float) -> None:
        """Process one SACK (wire.decode_sack_fields) addressed to this QP; raise
        RemoteProtocolError if invalid."""
        if meta.peer != self.peer:
            self._wrong_peer(meta.peer)
        entropy, probe_resp = fields.entropy, fields.probe_resp
        if entropy not in self.evs:
            self._check_ev(entropy)
        self._stats["sacks_received"] += 1
        outstanding = False
        if probe_resp:
            self._stats["probe_replies"] += 1
            outstanding = self.evs.on_probe_reply(entropy, now)
        if self.sender.on_sack(fields, now, probe_outstanding=outstanding, plane=meta.plane):
            self._learn_peer_tag(meta.ev)
        if self.evs._changes:
            self.drain_ev_changes()

    def on_probe(self, entropy: int, meta: RxMeta, now: float, out: list[TxPacket]) -> None:
        """Answer one PROBE (for the EV `entropy`) addressed to this QP."""
        self._check_peer(meta)
        self._control(self.receiver.probe_reply(entropy, meta.ecn), now, out, meta.plane,
                      entropy)
        self.drain_ev_changes()

    def handle(self, pkt: wire.Packet, meta: RxMeta, now: float, out: list[TxPacket]) -> None:
        """Process one decoded NACK addressed to this QP (data, SACKs and probes take on_data,
        on_sack and on_probe); raise RemoteProtocolError if invalid."""
        self._check_peer(meta)
        if isinstance(pkt, wire.NackPacket):
            self._check_ev(pkt.nack.entropy)
            self._stats["nacks_received"] += 1
            if self.sender.on_nack(pkt.nack, now, plane=meta.plane):
                self._learn_peer_tag(meta.ev)
        else:
            raise RemoteProtocolError(f"{type(pkt).__name__} is not valid on a connection QP")
        self.drain_ev_changes()

    def _check_peer(self, meta: RxMeta) -> None:
        if meta.peer != self.peer:
            self._wrong_peer(meta.peer)

    def _wrong_peer(self, peer: Hashable) -> None:
        raise RemoteProtocolError(f"QP {self.local_qpn:#x} belongs to {self.peer!r}, "
                                  f"not {peer!r}")

    def _learn_peer_tag(self, ev: int) -> None:
        """A believed answer came on one of the peer's EVs: its tag is the peer's secret, which
        authenticates the peer's PORT_STATUS from now on (Endpoint._on_port_status)."""
        self.peer_tag = ev >> INDEX_BITS

    def _check_ev(self, ev: int) -> None:
        if ev not in self.evs:
            raise RemoteProtocolError(f"echoed EV {ev:#x} is not one of QP {self.local_qpn:#x}'s")

    def _control(self, payload: bytes, now: float, out: list[TxPacket], plane: int,
                 echo_ev: int) -> None:
        """Queue a SACK/NACK (encoded) answering a packet that arrived on `plane` with EV
        `echo_ev`."""
        entry = self.evs.choose_control(now, plane=plane, echo_ev=echo_ev)
        if entry is None:
            self._stats["control_dropped"] += 1
            return
        path = entry.path
        out.append(TxPacket(self.peer, path.plane, path.route, entry.ev, wire.DSCP_CONTROL,
                            wire.ECN_NOT_ECT, payload))

    def control_tx(self, pkt: wire.Packet, entry: EvEntry) -> TxPacket:
        return TxPacket(self.peer, entry.path.plane, entry.path.route, entry.ev,
                        wire.DSCP_CONTROL, wire.ECN_NOT_ECT, wire.encode_packet(pkt))

    # ---- output ------------------------------------------------------------------------------

    def poll(self, now: float, out: list[TxPacket]) -> None:
        if self.sender.error is not None:
            return  # a failed QP sends nothing, probes included
        start = len(out)
        for entry in self.evs.probes_due(now):
            probe = wire.encode_probe_fields(self.remote_qpn, self._probe_seq, entry.ev)
            self._probe_seq = wire.psn_add(self._probe_seq, 1)
            self.evs.on_probe_sent(entry.ev, now)
            self._stats["probes_sent"] += 1
            path = entry.path
            out.append(TxPacket(self.peer, path.plane, path.route, entry.ev, wire.DSCP_CONTROL,
                                wire.ECN_NOT_ECT, probe))
        self.sender.poll(now, out)
        tx_per_ev = self.tx_per_ev
        for i in range(start, len(out)):
            tx_per_ev[out[i].ev] += 1
        if self.evs._changes:
            self.drain_ev_changes()

    def deadline(self) -> float | None:
        if self.sender.error is not None:
            return None
        sender, evs = self.sender.deadline(), self.evs.next_deadline()
        if sender is None or (evs is not None and evs < sender):
            return evs
        return sender

    def on_timer(self, now: float) -> None:
        self.evs.advance(now)
        self.sender.on_timer(now)
        self.drain_ev_changes()

    def drain_ev_changes(self) -> None:
        for ev, old, new, reason in self.evs.drain_changes():
            if new is EvState.ASSUMED_BAD and old is not EvState.ASSUMED_BAD:
                self._stats["ev_retired"] += 1
            if old is EvState.ASSUMED_BAD and new is EvState.GOOD:
                self._stats["ev_reinstated"] += 1
            self._emit(EvStateChanged(self.local_qpn, ev, old, new, reason))

    # ---- planes ------------------------------------------------------------------------------

    def set_plane_usable(self, plane: int, usable: bool) -> None:
        if plane not in self.planes:
            return
        self.evs.set_plane_usable(plane, usable)
        if not usable:
            self.sender.plane_down(plane)

    def entry_on_plane(self, plane: int) -> EvEntry | None:
        """An EV on `plane` for endpoint messages, GOOD ones first, rotating among them."""
        entries = [e for e in self.evs.entries() if e.path.plane == plane]
        if not entries:
            return None
        good = [e for e in entries if e.state is EvState.GOOD] or entries
        self._plane_cursor[plane] += 1
        return good[self._plane_cursor[plane] % len(good)]

    def ev_stats(self) -> dict[int, dict[str, object]]:
        stats: dict[int, dict[str, object]] = {}
        for entry in self.evs.entries():
            stats[entry.ev] = {
                "state": entry.state.name,
                "plane": entry.path.plane,
                "route": str(entry.path.route),
                "pool": entry.pool,
                "tx_packets": self.tx_per_ev[entry.ev],
                **entry.counters,
            }
        return stats

    def ev_view(self, paths: bool = False) -> dict[int, list[object]]:
        """EV -> [state, tx packets] (+ [plane, route] with `paths`): what the run view
        samples twice a second, without ev_stats' per-EV counters."""
        return {e.ev: [e.state.name, self.tx_per_ev[e.ev],
                       *((e.path.plane, str(e.path.route)) if paths else ())]
                for e in self.evs.entries()}
