"""One way to name a fabric everywhere (fabric.options): presets by name, sizes that override
a preset's, and a fabric the addressing cannot hold refused up front with the reason."""

from __future__ import annotations

import argparse

import pytest

from controller.__main__ import main as controller_main
from fabric.options import PRESETS, add_fabric_args, fabric_from_args
from fabric.topology import TopologyError
from host_agent.agent import parse_args as agent_args


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_fabric_args(p)
    return p.parse_args(argv)


@pytest.mark.parametrize("name, switches, hosts, paths", [
    ("default", 16, 4, 8), ("paths-32", 40, 4, 32), ("paths-128", 144, 4, 128),
    ("paths-256", 272, 4, 256), ("hosts-16", 128, 16, 64), ("hosts-256", 256, 256, 128),
    ("hosts-1024", 768, 1024, 256)])
def test_presets_are_the_fabrics_they_are_named_for(name, switches, hosts, paths) -> None:
    f = fabric_from_args(parse("--fabric", name))
    assert (len(f.switches), f.hosts) == (switches, hosts)
    assert len(f.all_paths(0, f.hosts - 1)) == paths  # hosts on different T0s


def test_sizes_override_the_preset_and_default_to_it() -> None:
    f = fabric_from_args(parse("--fabric", "paths-128", "--t1", "8"))
    assert (f.planes, f.t0_per_plane, f.t1_per_plane, f.hosts_per_t0) == (8, 2, 8, 2)
    f = fabric_from_args(parse("--t1", "4"))
    assert (f.planes, f.t1_per_plane) == (PRESETS["default"][0], 4)


def test_a_fabric_the_addressing_cannot_hold_is_refused_with_the_reason() -> None:
    with pytest.raises(TopologyError, match=r"fabric 17x2x2x2 .*planes must be 1\.\.16"):
        fabric_from_args(parse("--planes", "17"))
    with pytest.raises(SystemExit):
        parse("--fabric", "paths-9000")


def test_entry_points_share_the_options(capsys) -> None:
    assert controller_main(["paths", "--fabric", "paths-32", "--json"]) == 0
    assert '"plane": 3' in capsys.readouterr().out
    args = agent_args(["--host", "0", "--socket", "/unused.sock", "--fabric", "hosts-16"])
    assert args.fabric == "hosts-16" and args.planes is None


def test_bench_and_sim_use_their_own_fabrics_unless_one_is_named(capsys) -> None:
    from bench.__main__ import parse_args as bench_args
    from sim.__main__ import main as sim_main

    assert bench_args(["permutation"]).fabric_model is None
    named = bench_args(["permutation", "--fabric", "paths-32"]).fabric_model
    assert (named.planes, named.t1_per_plane) == (4, 8)
    assert bench_args(["permutation", "--t1", "4"]).fabric_model.t1_per_plane == 4
    with pytest.raises(SystemExit):
        bench_args(["permutation", "--planes", "17"])
    assert sim_main(["clean", "--fabric", "paths-32", "--size", "200000", "--json"]) == 0
    assert '"t1_per_plane": 8' in capsys.readouterr().out
    assert sim_main(["incast", "--fabric", "default"]) == 2  # incast names hosts 1..8
    assert "needs at least 9 hosts" in capsys.readouterr().err
