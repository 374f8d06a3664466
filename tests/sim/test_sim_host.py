"""The host adapter: framing of TxPackets, peer lookup, malformed input, NIC state to the core."""

from __future__ import annotations

from ipaddress import IPv6Address

from fabric.topology import Fabric
from host_agent.core import Endpoint
from sim.engine import EventLoop
from sim.host import HostAdapter
from sim.network import Network
from wire import DSCP_CONTROL, Envelope, decode_frame, encode_frame

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)


def pair() -> tuple[EventLoop, Network, HostAdapter, HostAdapter]:
    loop = EventLoop()
    net = Network(FABRIC, loop)
    a = HostAdapter(net, 0, Endpoint(planes=2, name="h0", seed=1))
    b = HostAdapter(net, 1, Endpoint(planes=2, name="h1", seed=2))
    a.connect(1, 0x100, 0x100)
    b.connect(0, 0x100, 0x100)
    return loop, net, a, b


def test_connect_offers_every_topology_path() -> None:
    _, _, a, _ = pair()
    paths = a.connect(1, 0x101, 0x101)
    assert {(p.plane, p.route) for p in paths} == {
        (p.plane, p.address) for p in FABRIC.all_paths(0, 1)}
    assert len(paths) == FABRIC.planes * FABRIC.t1_per_plane


def test_frames_carry_nic_addresses_and_the_route() -> None:
    loop, net, a, b = pair()
    region = b.endpoint.register_memory(10_000)
    seen: list[tuple[int, bytes]] = []
    original = b.on_frame

    def spy(plane: int, frame: bytearray) -> None:
        seen.append((plane, bytes(frame)))
        original(plane, frame)

    b.on_frame = spy  # type: ignore[method-assign]
    a.endpoint.post_write(0x100, bytes(range(100)) * 100, region.va, region.rkey, now=0.0)
    a.wake()
    loop.run(until=0.1)
    assert bytes(region.buffer) == bytes(range(100)) * 100
    data = [(plane, decode_frame(f)[0]) for plane, f in seen]
    data = [(plane, e) for plane, e in data if e.dscp != DSCP_CONTROL]
    assert data
    for plane, env in data:
        assert env.inner_src == env.outer_src == FABRIC.nic(0, plane).address
        assert env.inner_dst == FABRIC.nic(1, plane).address
        # the last switch rewrote the MACs, as on the real fabric: its own, then the NIC's
        assert env.src_mac == FABRIC.t0(plane, FABRIC.nic(1, plane).t0).mac
        assert env.dst_mac == FABRIC.nic(1, plane).mac
    assert sum(a.data_tx_per_plane) == len(data) and all(a.data_tx_per_plane)


def test_malformed_and_unknown_source_frames_are_counted_not_raised() -> None:
    loop, net, a, b = pair()
    b.on_frame(0, bytearray(b"\x00" * 60))
    nic = FABRIC.nic(1, 0)
    env = Envelope(nic.mac, nic.mac, IPv6Address("fd00:99::1"), nic.address,
                   IPv6Address("fd00:99::1"), nic.address, 5, DSCP_CONTROL, 0)
    b.on_frame(0, bytearray(encode_frame(env, b"\x00" * 40)))
    assert b.malformed == 2
    assert b.endpoint.stats()["rx_packets"] == 0


def test_nic_down_reaches_the_endpoint_and_the_peer() -> None:
    loop, net, a, b = pair()
    net.set_link_up(net.host_link(1, 1), False)
    loop.run(until=0.01)
    assert b.endpoint.stats()["port_status_sent"] > 0
    assert a.endpoint.peer_planes_up(1) == {0}
