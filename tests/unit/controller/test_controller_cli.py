"""Host path export, the P4Runtime codec, the shell helpers and the CLI (no switch needed)."""

from __future__ import annotations

import itertools
import json
import socket

import pytest
from traitlets.config.loader import Config

from controller.__main__ import main
from controller.install import InstallError, device_config
from controller.shell import SHELL_ELECTION_ID, ShellError, check_pipeline, shell_args, without_jedi
from controller.tables import diff, fabric_tables, link_key
from fabric import hostpaths
from fabric.topology import Fabric, TopologyError
from p4rt.codec import Codec, write_phases
from p4rt.entities import Update


def test_host_paths_match_fabric_and_round_trip() -> None:
    fabric = Fabric(planes=3, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)
    data = hostpaths.export(fabric)
    same_t0_pairs = fabric.t0_per_plane * fabric.hosts_per_t0 * (fabric.hosts_per_t0 - 1)
    pairs = fabric.hosts * (fabric.hosts - 1)
    assert len(data["paths"]) == fabric.planes * (same_t0_pairs + (pairs - same_t0_pairs)
                                                  * fabric.t1_per_plane)
    loaded_fabric, paths = hostpaths.load(json.dumps(data))
    assert loaded_fabric == fabric
    assert paths == list(hostpaths.all_host_paths(fabric))
    for src, dst in itertools.permutations(range(fabric.hosts), 2):
        mine = hostpaths.host_paths(fabric, src, dst)
        for hp, path in zip(mine, fabric.all_paths(src, dst), strict=False):
            assert (hp.route, hp.plane, hp.spine) == (path.address, path.plane, path.spine)
            assert (hp.src_addr, hp.dst_addr) == (path.src.address, path.dst.address)
            assert hp.next_hop_mac == fabric.t0(path.plane, path.src.t0).mac
            assert hp.src_ifname == f"h{src}-eth{path.plane}"


def test_host_path_errors() -> None:
    fabric = Fabric(planes=1, t0_per_plane=1, t1_per_plane=1, hosts_per_t0=2)
    with pytest.raises(TopologyError, match="itself"):
        hostpaths.host_paths(fabric, 1, 1)
    data = hostpaths.export(fabric)
    with pytest.raises(ValueError, match="re-export"):
        hostpaths.load(json.dumps({**data, "version": 99}))
    del data["paths"][0]["route"]
    with pytest.raises(ValueError, match="malformed path record"):
        hostpaths.load(json.dumps(data))


def test_codec_round_trips_every_entity() -> None:
    codec = Codec.committed()
    fabric = Fabric(planes=2, t0_per_plane=3, t1_per_plane=2, hosts_per_t0=2)
    for tables in fabric_tables(fabric).values():
        for entity in tables.entities():
            encoded = codec.encode(entity)
            assert codec.decode(encoded) == entity
    entity = fabric_tables(fabric)["p0l0"].entries[0]
    wire = codec.encode(entity).table_entry.match[0].exact.value
    assert wire == (0xFCBBBBBB0100).to_bytes(6, "big")  # canonical: no leading zero bytes


def test_phases_never_mix_kinds_or_types() -> None:
    fabric = Fabric(planes=1, t0_per_plane=3, t1_per_plane=2, hosts_per_t0=1)
    full = fabric_tables(fabric)["p0l0"]
    cut = fabric_tables(fabric, {link_key("p0l0", "p0s0"), link_key("p0l0", "p0s1")})["p0l0"]
    updates = [Update("INSERT", e) for e in full.entities()] + diff(full, cut)
    phases = write_phases(updates)
    assert [len(p) for p in phases] == [len(full.members), len(full.groups), len(full.entries),
                                        2, 2]
    for phase in phases:
        assert len({(u.kind == "DELETE", type(u.entity)) for u in phase}) == 1


def test_device_config_per_target() -> None:
    assert device_config("soft") == b""
    with pytest.raises(InstallError, match="unknown target"):
        device_config("tofino")


def test_shell_arguments_and_jedi() -> None:
    fabric = Fabric()
    switch = fabric.by_name["p1s0"]
    assert shell_args(fabric, "p1s0") == [
        "--grpc-addr", switch.grpc_address, "--device-id", str(switch.device_id),
        "--election-id", f"{SHELL_ELECTION_ID[0]},{SHELL_ELECTION_ID[1]}"]
    with pytest.raises(TopologyError, match="no switch"):
        shell_args(fabric, "p9l0")
    seen = {}
    without_jedi(lambda **kw: seen.update(kw))(config=Config(), argv=[])
    assert seen["config"].IPCompleter.use_jedi is False


def test_shell_refuses_unreachable_switch() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(ShellError, match="cannot reach"):
            check_pipeline(f"127.0.0.1:{port}", 1, timeout=1.0)


def test_cli_rejects_bad_fabric(capsys: pytest.CaptureFixture) -> None:
    assert main(["install", "--planes", "0"]) == 2
    assert "planes must be 1..16" in capsys.readouterr().err
    assert main(["paths", "--ecn-threshold", "50", "--trim-threshold", "10"]) == 2
    assert "must not exceed" in capsys.readouterr().err
    assert main(["tables", "--switch", "p0x0"]) == 2
    assert "no switch" in capsys.readouterr().err


def test_cli_paths_and_tables(capsys: pytest.CaptureFixture) -> None:
    assert main(["paths", "--planes", "2", "--t0", "2", "--t1", "1", "--hosts-per-t0", "1",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fabric"]["planes"] == 2
    assert {p["route"] for p in data["paths"]} == {
        str(p.address) for s, d in itertools.permutations(range(2), 2)
        for p in Fabric(2, 2, 1, 1).all_paths(s, d)}
    assert main(["tables", "--planes", "1", "--t0", "1", "--t1", "1", "--hosts-per-t0", "1",
                 "--switch", "p0s0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("p0s0:") and "my_usid_table" in out
