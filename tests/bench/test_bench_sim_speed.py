"""bench.simulated.sim_speed reports the simulator's speed and setup costs, and that the same seed
gave the same result in every repeat."""

from __future__ import annotations

import json

from bench.simulated import sim_speed


def test_sim_speed_reports_speed_costs_and_determinism(tmp_path) -> None:
    out = tmp_path / "speed.json"
    assert sim_speed.main(["--size", "300000", "--repeat", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert len(runs) == 2 and all(r["ok"] for r in runs)
    assert report["deterministic"] and runs[0]["digest"] == runs[1]["digest"]
    assert runs[0]["data_packets"] > 0 and report["data_packets_per_s"] > 0
    assert report["run_data_packets_per_s"] > report["data_packets_per_s"]  # set-up excluded
    assert runs[0]["events_per_data_packet"] > 2  # a hop each way at least
    setup = report["setup"]
    assert setup["bytes_per_switch"] > 0 and setup["bytes_per_host"] > 0
    assert report["fabric"]["switches"] == 16 and report["fabric"]["hosts"] == 4


def test_a_different_result_changes_the_digest() -> None:
    base = {"ok": True, "bytes": 10, "sim": {"events": 5, "wall_s": 1.0}}
    slower = {**base, "sim": {"events": 5, "wall_s": 2.0}}
    other = {**base, "sim": {"events": 6, "wall_s": 1.0}}
    assert sim_speed.digest(base) == sim_speed.digest(slower) != sim_speed.digest(other)


def test_split_times_the_hosts_apart_and_leaves_the_adapter_as_it_was(tmp_path) -> None:
    from sim.host import HostAdapter
    before = {name: getattr(HostAdapter, name) for name in sim_speed._HOST_ENTRIES}
    out = tmp_path / "split.json"
    assert sim_speed.main(["--size", "300000", "--split", "--json", str(out)]) == 0
    split = json.loads(out.read_text())["split"]
    assert 0 < split["hosts_s"] < split["run_s"] and 0 < split["hosts_share"] < 1
    per_packet = split["hosts_us_per_data_packet"] + split["network_us_per_data_packet"]
    assert split["free_network_data_packets_per_s"] > 1e6 / per_packet  # the ceiling is above
    assert {name: getattr(HostAdapter, name) for name in sim_speed._HOST_ENTRIES} == before
