"""The simulated fabric on its own: forwarding, queueing, trimming, ECN, priority, failures."""

from __future__ import annotations

import pytest

from fabric.topology import Fabric, shift_usid, usid_address
from sim.engine import EventLoop, SimulationError
from sim.network import Network, NetworkConfigError, QueueConfig
from wire import (
    DATA_HEADERS_LEN,
    DSCP_CONTROL,
    DSCP_NO_TRIM,
    DSCP_TRIMMABLE,
    DSCP_TRIMMED,
    DSCP_TRIMMED_LASTHOP,
    ECN_CE,
    ECN_ECT0,
    ECN_NOT_ECT,
    OP_WRITE_ONLY_IMM,
    Bth,
    DataPacket,
    Envelope,
    Meth,
    ProbeExt,
    ProbePacket,
    Reth,
    decode_frame,
    decode_packet,
    encode_frame,
    encode_packet,
)

RATE = 10e9
DELAY = 1e-6
FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)


class Sink:
    """Test handler: keeps every frame a host receives and every NIC state change."""

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop
        self.frames: list[tuple[float, int, bytes]] = []
        self.nic_changes: list[tuple[float, int, bool]] = []

    def on_frame(self, plane: int, frame: bytearray) -> None:
        self.frames.append((self.loop.now, plane, bytes(frame)))

    def on_nic_state(self, plane: int, up: bool) -> None:
        self.nic_changes.append((self.loop.now, plane, up))


def make(queues: QueueConfig | None = None, seed: int = 0, fabric: Fabric = FABRIC):
    loop = EventLoop()
    net = Network(fabric, loop, rate_bps=RATE, delay_s=DELAY, queues=queues, seed=seed)
    sinks = [Sink(loop) for _ in range(fabric.hosts)]
    for h, sink in enumerate(sinks):
        net.attach(h, sink)
    return loop, net, sinks


def data_frame(src: int, dst: int, plane: int, spine: int | None = 0, *, payload: int = 1024,
               dscp: int = DSCP_TRIMMABLE, ecn: int = ECN_ECT0, psn: int = 0, imm: int | None = 7,
               fabric: Fabric = FABRIC) -> bytes:
    path = next(p for p in fabric.paths(src, dst, plane) if p.spine == spine)
    pkt = DataPacket(Bth(OP_WRITE_ONLY_IMM, 0x100, psn, ack_req=True), Meth(1),
                     Reth(0x1000 + psn * payload, 0x55, payload),
                     bytes(range(256)) * (payload // 256), imm)
    env = Envelope(path.src.mac, "02:00:00:00:01:00", path.src.address, path.address,
                   path.src.address, path.dst.address, 0xABCDE + psn, dscp, ecn)
    return encode_frame(env, encode_packet(pkt))


def psn_of(frame: bytes) -> int:
    return decode_packet(decode_frame(frame)[1]).bth.psn


def control_frame(src: int, dst: int, plane: int, spine: int | None = 0) -> bytes:
    path = next(p for p in FABRIC.paths(src, dst, plane) if p.spine == spine)
    pkt = ProbePacket(Bth(0xDE, 0x100, 1), ProbeExt(0x1234))
    env = Envelope(path.src.mac, "02:00:00:00:01:00", path.src.address, path.address,
                   path.src.address, path.dst.address, 0x1234, DSCP_CONTROL, ECN_NOT_ECT)
    return encode_frame(env, encode_packet(pkt))


def test_cross_spine_forwarding_shifts_usids_and_decrements_hop_limit() -> None:
    loop, net, sinks = make()
    frame = data_frame(0, 2, plane=1, spine=1)
    net.hosts[0].send(1, bytearray(frame))
    loop.run(until=1.0)
    assert len(sinks[2].frames) == 1
    when, plane, got = sinks[2].frames[0]
    assert plane == 1
    env, payload = decode_frame(got)
    sent_env, sent_payload = decode_frame(frame)
    assert payload == sent_payload
    assert env.hop_limit == sent_env.hop_limit - 3
    path = next(p for p in FABRIC.paths(0, 2, 1) if p.spine == 1)
    expected = int(path.address)
    for _ in range(3):
        expected = shift_usid(expected)
    assert int(env.outer_dst) == expected == int(usid_address([path.dst.usid]))
    # Four store-and-forward hops (NIC, T0, T1, T0), each serialization + propagation.
    assert when == pytest.approx(4 * (len(frame) * 8 / RATE + DELAY))
    assert all(not s.frames for i, s in enumerate(sinks) if i != 2)


def test_same_t0_path_uses_one_switch() -> None:
    loop, net, sinks = make()
    frame = data_frame(0, 1, plane=0, spine=None)
    net.hosts[0].send(0, bytearray(frame))
    loop.run(until=1.0)
    (when, _, got), = sinks[1].frames
    assert decode_frame(got)[0].hop_limit == decode_frame(frame)[0].hop_limit - 1
    assert when == pytest.approx(2 * (len(frame) * 8 / RATE + DELAY))


def test_queue_serializes_back_to_back() -> None:
    loop, net, sinks = make()
    frames = [data_frame(0, 2, 0, 0, psn=i) for i in range(5)]
    for f in frames:
        net.hosts[0].send(0, bytearray(f))
    loop.run(until=1.0)
    times = [t for t, _, _ in sinks[2].frames]
    ser = len(frames[0]) * 8 / RATE
    assert len(times) == 5
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == pytest.approx([ser] * 4)
    assert [psn_of(f) for _, _, f in sinks[2].frames] == list(range(5))


def _congest(net: Network, a: str, b: str, factor: float = 100.0) -> None:
    net.set_link_rate(net.link(a, b), RATE / factor)


def _send_two_bursts(net: Network, loop: EventLoop, frames: list[bytes], src: int = 0,
                     plane: int = 0) -> None:
    """Half the frames now, half after the congested port's first departure has finished:
    the P4 program decides on the depth recorded by the last data departure (p4src/README.md
    "Queue depth"), so only the second burst can see a standing queue."""
    half = len(frames) // 2
    for f in frames[:half]:
        net.hosts[src].send(plane, bytearray(f))
    first = len(frames[0]) * 8 / (RATE / 100)
    for f in frames[half:]:
        loop.at(first * 1.5, net.hosts[src].send, plane, bytearray(f))


def test_trim_exact_bytes_in_fabric() -> None:
    q = QueueConfig(capacity=16, ecn_threshold=2, trim_threshold=2)
    loop, net, sinks = make(q)
    _congest(net, "p0l0", "p0s0")  # the uplink from the sender's T0 is the bottleneck
    frames = [data_frame(0, 2, 0, 0, psn=i) for i in range(12)]
    _send_two_bursts(net, loop, frames)
    loop.run(until=1.0)
    got = {decode_packet(decode_frame(f)[1]).bth.psn: f for _, _, f in sinks[2].frames}
    assert len(got) == 12 and net.trims == 6
    trimmed = sorted(psn for psn, f in got.items() if len(f) == DATA_HEADERS_LEN)
    # psn 0 leaves at once (depth 0 recorded), 1-5 queue; psn 1 leaves 4 behind, so the
    # second burst (6-11) meets a recorded depth of 4 >= 2 and is trimmed.
    assert trimmed == list(range(6, 12))
    original_env, original_payload = decode_frame(frames[6])
    env = decode_frame(got[6])[0]
    last_t0 = FABRIC.t0(0, FABRIC.nic(2, 0).t0)
    expected_env = Envelope(last_t0.mac, FABRIC.nic(2, 0).mac, original_env.outer_src,
                            env.outer_dst, original_env.inner_src, original_env.inner_dst,
                            original_env.ev, DSCP_TRIMMED, original_env.ecn,
                            original_env.hop_limit - 3)
    expected = bytearray(encode_frame(expected_env, original_payload[:DATA_HEADERS_LEN - 102]))
    expected[54:56] = frames[6][54:56]  # the inner traffic class is the sender's, never rewritten
    assert got[6] == bytes(expected)
    raw = got[6]
    assert int.from_bytes(raw[18:20], "big") == 80  # outer payload length
    assert int.from_bytes(raw[58:60], "big") == 40  # inner payload length
    assert int.from_bytes(raw[98:100], "big") == 40  # UDP length
    pkt = decode_packet(decode_frame(raw)[1])
    assert pkt.trimmed and pkt.imm is None and pkt.reth.dma_len == 1024
    # Trimmed headers overtake the waiting data packets (priority queue).
    order = [decode_packet(decode_frame(f)[1]).bth.psn for _, _, f in sinks[2].frames]
    assert order == [0, 1] + list(range(6, 12)) + [2, 3, 4, 5]


def test_trim_at_host_facing_port_is_lasthop() -> None:
    q = QueueConfig(capacity=16, ecn_threshold=1, trim_threshold=3)
    loop, net, sinks = make(q)
    _congest(net, "p0l1", "h2")
    frames = [data_frame(0, 2, 0, i % 2, psn=i) for i in range(12)]
    _send_two_bursts(net, loop, frames)
    loop.run(until=1.0)
    envs = [decode_frame(f)[0] for _, _, f in sinks[2].frames]
    assert sorted(e.dscp for e in envs) == [DSCP_TRIMMABLE] * 6 + [DSCP_TRIMMED_LASTHOP] * 6
    # The host-facing queue passed the ECN threshold, but the last hop never marks.
    assert all(e.ecn == ECN_ECT0 for e in envs) and net.ecn_marks == 0


def test_ecn_marks_ect_only_above_threshold() -> None:
    q = QueueConfig(capacity=16, ecn_threshold=2, trim_threshold=16)
    loop, net, sinks = make(q)
    _congest(net, "p0l0", "p0s0")
    sent = [data_frame(0, 2, 0, 0, psn=i, ecn=ECN_NOT_ECT if i == 8 else ECN_ECT0)
            for i in range(12)]
    _send_two_bursts(net, loop, sent)
    loop.run(until=1.0)
    ecn = {psn_of(f): decode_frame(f)[0].ecn for _, _, f in sinks[2].frames}
    # The first burst meets a recorded depth of 0; the second one of 4 >= 2: ECT frames get
    # CE, the one Not-ECT frame passes unmarked.
    assert ecn == {i: ECN_ECT0 for i in range(6)} | {
        i: ECN_NOT_ECT if i == 8 else ECN_CE for i in range(6, 12)}
    assert net.ecn_marks == 5 and net.trims == 0


def test_control_overtakes_data_and_non_trimmable_tail_drops() -> None:
    q = QueueConfig(capacity=3, ecn_threshold=3, trim_threshold=3)
    loop, net, sinks = make(q)
    _congest(net, "p0l0", "p0s0")
    for i in range(6):
        net.hosts[0].send(0, bytearray(data_frame(0, 2, 0, 0, psn=i, dscp=DSCP_NO_TRIM)))
    net.hosts[0].send(0, bytearray(control_frame(0, 2, 0, 0)))
    loop.run(until=1.0)
    kinds = [decode_frame(f)[0].dscp for _, _, f in sinks[2].frames]
    # psn 0 leaves first; 1..3 fill the queue, 4 and 5 are tail-dropped; the probe jumps ahead.
    assert kinds == [DSCP_NO_TRIM, DSCP_CONTROL] + [DSCP_NO_TRIM] * 3
    assert net.drops["tail_drop"] == 2 and net.trims == 0


@pytest.mark.parametrize("factor", [None, 8.0])
def test_control_frames_take_data_time_unless_they_have_a_class_of_their_own(factor) -> None:
    """QueueConfig.control_rate_factor (the emulation's shaping): interleaved probes cost
    the data frames behind them their serialization time on a shared serializer, none on a
    class of their own, where each probe takes 1/factor of its time."""
    loop, net, sinks = make(QueueConfig(control_rate_factor=factor))
    data = [data_frame(0, 2, 0, 0, psn=i) for i in range(4)]
    probe = control_frame(0, 2, 0, 0)
    for f in data:
        net.hosts[0].send(0, bytearray(f))
        net.hosts[0].send(0, bytearray(probe))
    loop.run(until=1.0)
    got = [(t, decode_frame(f)[0].dscp) for t, _, f in sinks[2].frames]
    last_data = max(t for t, dscp in got if dscp == DSCP_TRIMMABLE)
    alone = 4 * (len(data[0]) * 8 / RATE + DELAY) + 3 * len(data[0]) * 8 / RATE
    assert len(got) == 8
    if factor is None:
        assert last_data > alone + 3 * len(probe) * 8 / RATE * 0.99
    else:
        assert last_data == pytest.approx(alone)
        first_probe = min(t for t, dscp in got if dscp == DSCP_CONTROL)
        assert first_probe == pytest.approx(4 * (len(probe) * 8 / (RATE * factor) + DELAY))


def test_link_down_drops_queued_and_in_flight_and_tells_the_host() -> None:
    loop, net, sinks = make()
    link = net.link("p0l0", "p0s0")
    for i in range(10):
        net.hosts[0].send(0, bytearray(data_frame(0, 2, 0, 0, psn=i)))
    loop.at(2.5e-6, net.set_link_up, link, False)
    loop.run(until=1.0)
    assert len(sinks[2].frames) == 0  # the first frame was on that link at 2.5 us
    assert net.drops["link_down"] == 10
    # Offered while down: dropped too; back up: forwarded again.
    net.hosts[0].send(0, bytearray(data_frame(0, 2, 0, 0)))
    loop.run(until=1.5)
    net.set_link_up(link, True)
    net.hosts[0].send(0, bytearray(data_frame(0, 2, 0, 0)))
    loop.run(until=2.0)
    assert len(sinks[2].frames) == 1 and net.drops["link_down"] == 11
    host_link = net.host_link(2, 1)
    net.flap(host_link, 3.0, 3.5)
    loop.run(until=4.0)
    assert sinks[2].nic_changes == [(3.0, 1, False), (3.5, 1, True)]


def test_switch_down_blackholes_and_its_hosts_see_loss_of_signal() -> None:
    loop, net, sinks = make()
    net.set_switch_up("p1l1", False)
    net.hosts[0].send(1, bytearray(data_frame(0, 2, 1, 0)))
    net.hosts[0].send(0, bytearray(data_frame(0, 2, 0, 0)))
    loop.run(until=1.0)
    assert [p for _, p, _ in sinks[2].frames] == [0]
    assert (0.0, 1, False) in sinks[2].nic_changes and (0.0, 1, False) in sinks[3].nic_changes
    net.set_switch_up("p1l1", True)
    net.hosts[0].send(1, bytearray(data_frame(0, 2, 1, 0)))
    loop.run(until=2.0)
    assert [p for _, p, _ in sinks[2].frames] == [0, 1]


def test_random_loss_rate_and_determinism() -> None:
    def run(seed: int) -> tuple[int, list[float]]:
        loop, net, sinks = make(seed=seed)
        net.set_loss(net.link("p0l0", "p0s0"), 0.2)
        for i in range(500):
            loop.at(i * 1e-6, net.hosts[0].send, 0, bytearray(data_frame(0, 2, 0, 0, psn=i)))
        loop.run(until=1.0)
        return net.drops["random_loss"], [t for t, _, _ in sinks[2].frames]

    lost, times = run(3)
    assert 60 <= lost <= 140 and lost + len(times) == 500
    assert run(3) == (lost, times)
    assert run(4) != (lost, times)


def test_port_loss_drops_one_direction_only() -> None:
    """The loss scenario drops on switch egress ports, as the bench's nftables rules do: a
    port's loss leaves its link's other direction alone."""
    def lost_with_loss_on(node: str) -> int:
        loop, net, sinks = make()
        port = next(p for p in net.link("p0l0", "p0s0").ports if p.node.name == node)
        net.set_port_loss(port, 0.9)
        for i in range(50):  # plane 0, spine 0: over p0l0 -> p0s0
            loop.at(i * 1e-6, net.hosts[0].send, 0, bytearray(data_frame(0, 2, 0, 0, psn=i)))
        loop.run(until=1.0)
        assert net.drops["random_loss"] + len(sinks[2].frames) == 50
        return net.drops["random_loss"]

    assert lost_with_loss_on("p0l0") >= 30  # the leaf's port sends towards the spine
    assert lost_with_loss_on("p0s0") == 0  # the spine's port towards the leaf: not this way


def test_bad_hop_limit_and_unknown_usid_are_dropped_and_counted() -> None:
    loop, net, sinks = make()
    frame = bytearray(data_frame(0, 2, 0, 0))
    frame[21] = 1
    net.hosts[0].send(0, frame)
    path = next(p for p in FABRIC.paths(0, 2, 0) if p.spine == 0)
    env, payload = decode_frame(data_frame(0, 2, 0, 0))
    bogus = Envelope(env.src_mac, env.dst_mac, env.outer_src, usid_address([path.dst.usid]),
                     env.inner_src, env.inner_dst, env.ev, env.dscp, env.ecn)
    net.hosts[0].send(0, bytearray(encode_frame(bogus, payload)))
    loop.run(until=1.0)
    assert not sinks[2].frames
    assert net.drops["hop_limit"] == 1 and net.drops["no_route"] == 1


def test_invalid_configuration_is_rejected() -> None:
    with pytest.raises(NetworkConfigError, match="trim_threshold"):
        QueueConfig(capacity=4, ecn_threshold=2, trim_threshold=5)
    loop, net, _ = make()
    with pytest.raises(NetworkConfigError, match="no link"):
        net.link("p0l0", "p1s0")
    with pytest.raises(NetworkConfigError, match="loss"):
        net.set_loss(net.link("p0l0", "p0s0"), 1.5)
    with pytest.raises(SimulationError):
        loop.at(-1.0, print)


def test_longest_rtt_from_a_host_is_the_longest_of_its_paths() -> None:
    """base_rtt_for walks T0s and spines instead of every path to every host (hosts^2 x
    spines); it must give what listing the paths gives, also with one link slowed down."""
    from fabric.options import PRESETS
    from sim.harness import Harness, SimSettings

    fabric = Fabric(*PRESETS["hosts-16"])
    h = Harness(fabric, SimSettings())
    before = h.base_rtt_for(9)
    h.net.set_link_rate(h.net.link(fabric.t0(0, 0).name, fabric.t1(0, 1).name), 1e9)
    h.net.set_link_rate(h.net.host_link(9, 3), 2e9)
    assert h.base_rtt_for(9) > before  # the table made before the change is not reused
    for src in range(fabric.hosts):
        listed = max(h.path_rtt(src, dst) for dst in range(fabric.hosts) if dst != src)
        assert h.base_rtt_for(src) == pytest.approx(listed, rel=1e-12), src
