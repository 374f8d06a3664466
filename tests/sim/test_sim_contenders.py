"""The bench's contenders in the simulator: RoCE-like QPs pinned by the switches' ECMP."""

from __future__ import annotations

from typing import Any

import pytest

from sim.__main__ import main
from sim.harness import Harness, SimSettings
from sim.scenarios import DEFAULT_FABRIC, run_scenario

SIZE = 2 * 1024 * 1024
_cache: dict[str, dict[str, Any]] = {}


def permutation(contender: str) -> dict[str, Any]:
    if contender not in _cache:
        _cache[contender] = run_scenario("permutation", size=SIZE,
                                         settings=SimSettings(contender=contender))
    return _cache[contender]


@pytest.mark.parametrize(("contender", "name"), [
    ("single_port", "single_port"), ("roce", "roce:4"), ("roce:8", "roce:8")])
def test_every_contender_delivers_every_byte(contender: str, name: str) -> None:
    r = permutation(contender)
    assert r["ok"] and r["contender"] == name  # plain roce: one QP per plane
    assert 0 < r["goodput_ratio"] <= 1.0


def test_single_port_keeps_to_plane_0() -> None:
    r = permutation("single_port")
    for host, per_plane in r["data_tx_per_plane"].items():
        assert per_plane[0] > 0 and per_plane[1:] == [0] * (len(per_plane) - 1), host


def test_roce_runs_one_qp_per_plane_each_on_one_route() -> None:
    h = Harness(DEFAULT_FABRIC, SimSettings(contender="roce"))
    t = h.add_transfer(0, 3, SIZE)
    assert len(t.lanes) == DEFAULT_FABRIC.planes
    h.start()
    assert h.run(1.0) and h.verified()
    sender = h.adapters[0]
    used = {route for route, count in sender.data_tx_per_route.items() if count}
    # one route a plane: the receiver's NIC address, which the switches' ECMP hashes
    assert len(used) == DEFAULT_FABRIC.planes
    assert all(n > 0 for n in sender.data_tx_per_plane)


def test_striped_writes_post_one_part_per_qp() -> None:
    h = Harness(DEFAULT_FABRIC, SimSettings(contender="roce:8", chunk=64 * 1024))
    t = h.add_transfer(0, 3, 256 * 1024)
    h.start()
    assert t.writes == 4 * 8  # 4 chunks, each striped over 8 QPs
    assert h.run(1.0) and h.verified()


def test_mrc_beats_the_single_path_baseline() -> None:
    """Deterministic (seed 1): one sprayed QP against one hash-pinned QP on plane 0."""
    assert permutation("mrc")["goodput_ratio"] > 3 * permutation("single_port")["goodput_ratio"]


def test_cli_names_the_contender_and_refuses_unknown_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clean", "--size", "100000", "--contender", "roce:2"]) == 0
    assert "clean, roce:2" in capsys.readouterr().out
    assert main(["clean", "--contender", "roce:0"]) == 2
    assert main(["clean", "--contender", "tcp"]) == 2
    assert "single_port" in capsys.readouterr().err
