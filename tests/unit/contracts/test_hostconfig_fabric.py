"""HostConfig.from_fabric holds what the path export gives (from_paths), made lazily and
sharing one address table per fabric; the adapter refuses frames claiming its own address."""

from __future__ import annotations

import pytest

from fabric import hostpaths
from fabric.options import PRESETS
from fabric.topology import Fabric
from host_agent.adapter import EndpointAdapter
from host_agent.core import Endpoint
from host_agent.hostconfig import HostConfig
from wire import Envelope, encode_frame

FABRICS = [Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1),
           Fabric(*PRESETS["hosts-16"])]


@pytest.mark.parametrize("fabric", FABRICS, ids=str)
def test_from_fabric_equals_the_path_export(fabric: Fabric) -> None:
    paths = list(hostpaths.all_host_paths(fabric))
    for host in (0, fabric.hosts // 2, fabric.hosts - 1):
        lazy = HostConfig.from_fabric(fabric, host)
        eager = HostConfig.from_paths(host, fabric.planes, paths)
        assert lazy.nics == eager.nics
        assert dict(lazy.peer_address) == eager.peer_address
        assert len(lazy.peer_address) == len(eager.peer_address)
        assert (host, 0) not in lazy.peer_address
        with pytest.raises(KeyError):
            lazy.peer_address[(host, 0)]  # noqa: B018
        assert sorted(lazy.paths) == sorted(eager.paths)
        assert all(lazy.paths[p] == eager.paths[p] for p in eager.paths)
        assert lazy.peer_of() == eager.peer_of()


def test_hosts_share_one_address_table() -> None:
    fabric = FABRICS[1]
    a, b = HostConfig.from_fabric(fabric, 0), HostConfig.from_fabric(fabric, 1)
    assert a.peer_of_packed() is b.peer_of_packed()


def test_a_frame_claiming_our_own_address_is_refused() -> None:
    fabric = FABRICS[0]
    config = HostConfig.from_fabric(fabric, 0)
    sent: list = []
    adapter = EndpointAdapter(Endpoint(planes=fabric.planes, name="h0"), config,
                              lambda plane, frame: sent.append(frame))
    nic = fabric.nic(0, 0)
    forged = Envelope("02:00:00:00:00:99", nic.mac, nic.address, nic.address, nic.address,
                      nic.address, 1, 0, 0)
    adapter.receive_frame(0, encode_frame(forged, bytes(64)), 0.0)
    assert adapter.rx[0]["rx_unknown_peer"] == 1 and adapter.rx[0]["rx_frames"] == 0
