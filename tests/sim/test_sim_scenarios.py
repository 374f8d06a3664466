"""The real Endpoint on the simulated fabric: every scenario's expected behaviour (issue 2)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sim.__main__ import main
from sim.harness import SimSettings
from sim.scenarios import SCENARIOS, ScenarioError, run_scenario

SIZE = 2 * 1024 * 1024  # smaller than the CLI default to keep the suite quick
_cache: dict[tuple[str, int], dict[str, Any]] = {}

# link-failure: the sender retires every EV on the dead path at once when its loss detector
# finds the path dark (host_agent/core/recovery.py, DARK_PATH_LOSSES), so its last data packet
# onto that path leaves soon after the failure. Measured (seed 1, SIZE, DEFAULT_FABRIC; the
# simulator is deterministic): recovery_rtts = 1.393. Bound: that plus 0.107 RTT (~8%), the
# same 1.5 RTTs the core unit test asserts for bypassing a dark path. Without the dark-path
# detector the same run gives 3.6 RTTs; needing 3 dark losses instead of 2 gives 1.70.
RECOVERY_BOUND_RTTS = 1.5
# clean: one loss-free cross-spine transfer. Measured (seed 1, SIZE): goodput_ratio = 0.8637
# (seeds 2 and 3 give the same). Bound: measured minus 0.0137 (~1.6%). NSCC's window sized
# from the one-way delay instead of the RTT gives 0.697; sized for 2 of the 4 NICs, 0.737.
CLEAN_GOODPUT_RATIO_MIN = 0.85


HIERARCHICAL_SIZE = 256 * 1024  # its 9 hosts and 8 phases a step make SIZE take 15-20 s


def result(name: str, seed: int = 1) -> dict[str, Any]:
    if (name, seed) not in _cache:
        size = HIERARCHICAL_SIZE if name.startswith("allreduce-2d") else SIZE
        _cache[(name, seed)] = run_scenario(name, size=size, settings=SimSettings(seed=seed))
    return _cache[(name, seed)]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_delivers_every_byte(name: str) -> None:
    r = result(name)
    assert r["ok"], {k: r[k] for k in ("completed", "drops", "timeouts", "transfers")}
    if name.startswith("allreduce"):  # each phase posts its own transfers again
        assert r["bytes"] == r["steps"] * r["step_bytes"] > 0
    else:
        assert r["bytes"] == sum(t["bytes"] for t in r["transfers"]) > 0
    assert 0 < r["goodput_ratio"] <= 1.0
    for key in ("timeouts", "nacks", "trims", "retired_evs", "reinstated_evs", "base_rtt_s",
                "duration_s", "goodput_bps", "tx_packets_per_plane", "fabric", "seed"):
        assert key in r


def test_clean_sprays_evenly_over_all_planes_without_loss() -> None:
    r = result("clean")
    assert r["drops"] == {} and r["timeouts"] == 0 and r["trims"] == 0
    sender = r["data_tx_per_plane"]["h0"]
    assert min(sender) >= 0.9 * max(sender) > 0
    assert r["goodput_ratio"] > CLEAN_GOODPUT_RATIO_MIN


def test_loss_recovers_from_untrimmed_drops() -> None:
    r = result("loss")
    assert r["drops"]["random_loss"] > 0
    # every data frame the fabric lost was resent (exact count; the remaining drops hit
    # SACKs), and nothing else was: per-path loss detection does not resend reordered packets
    assert r["data_frames_lost"] > 0
    assert r["retransmits"] >= r["data_frames_lost"] >= r["drops"]["random_loss"] // 4
    assert r["endpoint"]["spurious_retransmits"] <= r["data_frames_lost"] // 10
    assert r["retired_evs"] > 0


def test_link_failure_retires_the_dead_path_quickly() -> None:
    r = result("link-failure")
    assert r["ok"] and r["retired_evs"] > 0
    assert r["recovery_rtts"] < RECOVERY_BOUND_RTTS
    assert set(r["drops"]) <= {"link_down"}
    # every retirement is on the routes over the dead link (the bench's figure, same split)
    assert r["failed_route_retirements"] == r["retired_evs"]
    assert r["healthy_route_retirements"] == 0


def test_plane_failure_keeps_the_other_planes_busy() -> None:
    clean, failed = result("clean"), result("plane-failure")
    planes = failed["fabric"]["planes"]
    assert failed["goodput_bps"] >= 0.8 * (planes - 1) / planes * clean["goodput_bps"]
    assert failed["peer_notified_after_rtts"] is not None
    assert failed["data_on_failed_plane_after_notification"] == 0
    sender = failed["data_tx_per_plane"]["h0"]
    assert sender[0] < min(sender[1:])


def test_incast_trims_and_nacks_instead_of_timing_out() -> None:
    r = result("incast")
    assert r["fabric"]["hosts"] >= 9 and len(r["transfers"]) == 8
    assert r["trims"] > 0 and r["nacks"] > 0
    assert r["timeouts"] == 0


def test_ecn_moves_traffic_off_the_congested_spine() -> None:
    r = result("ecn")
    assert r["ecn_marks"] > 0
    assert r["congested_share_before"] == pytest.approx(0.5, abs=0.05)
    assert r["congested_share_after"] < 0.8 * r["congested_share_before"]
    # congestion is not loss: nothing is dropped, so no EV is retired and nothing resent
    assert r["drops"] == {} and r["retired_evs"] == 0 and r["retransmits"] == 0


def test_permutation_sends_and_receives_once_per_host_across_the_spines() -> None:
    r = result("permutation")
    pairs = [(t["sender"], t["receiver"]) for t in r["transfers"]]
    hosts = r["fabric"]["hosts"]
    assert sorted(s for s, _ in pairs) == sorted(d for _, d in pairs) == list(range(hosts))
    assert not {(d, s) for s, d in pairs} & set(pairs)  # no two hosts write to each other
    per_t0 = r["fabric"]["hosts_per_t0"]
    assert all(s // per_t0 != d // per_t0 for s, d in pairs)  # every flow crosses spines
    # the aggregate max-flow: every NIC of every host at line rate (a non-blocking fabric)
    f = r["fabric"]
    assert r["capacity_bps"] == hosts * f["planes"] * f["link_rate_bps"]
    assert r["sim"]["data_packets"] == r["endpoint"]["sacks_sent"] > 0


def test_same_seed_same_result_other_seed_differs() -> None:
    def strip(r: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k != "sim"}

    first = strip(result("loss"))
    again = strip(run_scenario("loss", size=SIZE, settings=SimSettings(seed=1)))
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    other = strip(run_scenario("loss", size=SIZE, settings=SimSettings(seed=2)))
    assert other["ok"] and other["drops"] != first["drops"]


def test_cli_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clean", "--json", "--size", "100000", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    r = json.loads(lines[-1])
    assert r["scenario"] == "clean" and r["seed"] == 3 and r["ok"] and r["bytes"] == 100000
    assert r["fabric"]["planes"] == 4 and r["fabric"]["queue"]["trim_threshold"] > 0


def test_cli_rejects_bad_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clean", "--size", "0"]) == 2
    assert main(["clean", "--queue-depth", "4", "--ecn-threshold", "2",
                 "--trim-threshold", "9"]) == 2
    assert "trim_threshold" in capsys.readouterr().err
    with pytest.raises(ScenarioError, match="unknown scenario"):
        run_scenario("nope")


def test_cli_help_lists_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "every switch port loses 1% of what it sends" in out and "link-failure:" in out


def test_link_delay_option_sets_the_links_and_the_base_rtt(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--link-delay (milliseconds, the emulation's option) is every simulated link's delay:
    the unloaded RTT across spines grows by 8 links x the delay, and the agents' base RTT
    (what their timers start from) with it."""
    out = {}
    for ms in ("0.001", "0.5"):
        assert main(["clean", "--json", "--size", "100000", "--link-delay", ms]) == 0
        out[ms] = json.loads(capsys.readouterr().out)
    grew = out["0.5"]["base_rtt_s"] - out["0.001"]["base_rtt_s"]
    assert grew == pytest.approx(8 * (0.5e-3 - 0.001e-3), rel=1e-6)
    assert out["0.5"]["fabric"]["delay_s"] == pytest.approx(0.5e-3)


def test_link_delay_out_of_range_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["clean", "--link-delay", "2000"])
    assert "link delay must be 0 to 1000 ms" in capsys.readouterr().err


# victim: MRC's victim goodput with the incast over alone, measured (seed 1): 0.81 at SIZE
# (a 419 KB victim, its first RTTs meet the trimmed downlinks), 0.89 at 4 MiB, 0.94 at 8 MiB,
# 0.97 at 16 MiB; roce's 0.23 at SIZE, with 2,686 go-back-N timeouts.
VICTIM_TARGET_SIZE = 8 * 1024 * 1024  # where the bench's target (>= 0.9) applies


def test_victim_keeps_its_goodput_beside_the_incast_and_roce_loses_it() -> None:
    """The paper's incast victim, on the bench's fabric and hosts: MRC's victim is unaffected
    (the bench's target, >= 0.9 of its goodput alone); a RoCE-like victim behind the same
    incast is not."""
    mixed, alone = result("victim"), result("victim-alone")
    assert mixed["victim"] == alone["victim"] == [11, 1]
    assert mixed["incast_senders"] == list(range(4, 11)) and mixed["incast_receiver"] == 0
    assert alone["incast_senders"] == [] and len(alone["transfers"]) == 1
    assert mixed["transfers"][0]["bytes"] == alone["transfers"][0]["bytes"] == SIZE // 5
    assert mixed["trims"] > 0 and alone["trims"] == 0  # the incast congests h0's downlinks
    mrc = mixed["victim_goodput_bps"] / alone["victim_goodput_bps"]
    roce = [run_scenario(name, size=SIZE, settings=SimSettings(seed=1, contender="roce"))
            for name in ("victim", "victim-alone")]
    assert all(r["ok"] for r in roce)
    assert roce[0]["victim_goodput_bps"] / roce[1]["victim_goodput_bps"] < 0.5 * mrc
    big = [run_scenario(name, size=VICTIM_TARGET_SIZE) for name in ("victim", "victim-alone")]
    assert big[0]["victim_goodput_bps"] / big[1]["victim_goodput_bps"] >= 0.9


def test_victim_layout_needs_room_off_and_on_t0_0() -> None:
    from fabric.topology import Fabric
    from sim.scenario_kit import victim_layout
    senders, receiver, v_src, v_dst = victim_layout(
        Fabric(planes=1, t0_per_plane=2, t1_per_plane=1, hosts_per_t0=2))
    assert (senders, receiver, v_src, v_dst) == ([2], 0, 3, 1)
    with pytest.raises(ScenarioError, match="2 hosts on T0 0"):
        victim_layout(Fabric(planes=1, t0_per_plane=2, t1_per_plane=1, hosts_per_t0=1))
