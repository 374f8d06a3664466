"""bench.metrics, bench.results and bench.plots on synthetic data (no network, no root)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import metrics, plots, results
from fabric.topology import Fabric

# 1000 bytes every 10 ms, nothing between 0.5 s and 1.3 s (an 0.8 s stall), then on to 1.5 s
STEADY = [(i / 100, (i + 1) * 1000) for i in range(50)]
RESUMED = [(1.3 + i / 100, 51_000 + i * 1000) for i in range(21)]
STALLED = STEADY + RESUMED


def test_longest_stall_finds_the_gap() -> None:
    assert metrics.longest_stall(STALLED) == pytest.approx(1.3 - 0.49)


def test_longest_stall_after_failure_counts_only_later_gaps() -> None:
    assert metrics.longest_stall(STALLED, after=1.35) == pytest.approx(0.01)
    assert metrics.longest_stall(STALLED, after=0.6) == pytest.approx(0.81)


def test_stall_of_a_flow_that_never_recovers_runs_until_given_up() -> None:
    assert metrics.longest_stall(STEADY, after=0.3, until=5.0) == pytest.approx(5.0 - 0.49)
    assert metrics.longest_stall(STEADY, until=0.49) == pytest.approx(0.01)


def test_repeated_samples_without_progress_are_not_progress() -> None:
    samples = [(0.0, 10), (0.1, 10), (0.2, 10), (0.3, 20)]
    assert metrics.longest_stall(samples) == pytest.approx(0.3)
    assert metrics.progress_times(samples) == [0.0, 0.3]


def test_connection_setup_is_not_a_stall() -> None:
    assert metrics.longest_stall([(2.0, 100), (2.01, 200)]) == pytest.approx(0.01)
    assert metrics.longest_stall([]) == 0.0


@pytest.mark.parametrize("bad", [[(0.2, 1), (0.1, 2)], [(0.1, 5), (0.2, 4)],
                                 [(math.nan, 1)]])
def test_broken_timelines_are_refused(bad: list[tuple[float, int]]) -> None:
    with pytest.raises(metrics.MetricError):
        metrics.longest_stall(bad)


def test_rate_and_goodput_series() -> None:
    # the sample at t=0 was already delivered at the start of the interval
    assert metrics.rate_bps(STALLED, 0.0, 0.5) == pytest.approx(49_000 * 8 / 0.5)
    assert metrics.rate_bps(STALLED, 0.6, 1.2) == 0.0
    series = metrics.goodput_series(STALLED, 0.25, 1.5)
    assert len(series) == 6
    assert series[3] == (0.75, 0.0)
    assert series[0][1] > 0
    with pytest.raises(metrics.MetricError):
        metrics.rate_bps(STALLED, 1.0, 1.0)
    with pytest.raises(metrics.MetricError):
        metrics.goodput_series(STALLED, 0.0)


def test_completion_time() -> None:
    assert metrics.completion_time(STALLED, 71_000) == pytest.approx(1.5)
    assert metrics.completion_time(STALLED, 71_001) is None


def test_percentiles_match_linear_interpolation() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert metrics.percentile(values, 0) == 1.0
    assert metrics.percentile(values, 50) == 3.0
    assert metrics.percentile(values, 100) == 5.0
    assert metrics.percentile(values, 99) == pytest.approx(4.96)
    assert metrics.percentile([7.0], 99) == 7.0
    d = metrics.distribution(values)
    assert (d["count"], d["min"], d["max"], d["mean"]) == (5, 1.0, 5.0, 3.0)
    with pytest.raises(metrics.MetricError):
        metrics.percentile([], 50)
    with pytest.raises(metrics.MetricError):
        metrics.percentile(values, 101)


def test_ratio() -> None:
    assert metrics.ratio(3.0, 2.0) == 1.5
    assert metrics.ratio(None, 2.0) is None
    assert metrics.ratio(3.0, 0.0) is None


def test_capacity_counts_planes_and_dead_links() -> None:
    f = Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)
    assert metrics.capacity_pps(f, 500, [0], [3]) == 2000
    assert metrics.capacity_pps(f, 500, [0], [3], [("h3", "p0l1")]) == 1500
    assert metrics.capacity_pps(f, 500, [0], [3], [("p0l0", "p0s0")]) == 2000  # other spine
    assert metrics.capacity_pps(f, 500, [1, 2, 3], [0]) == 2000  # incast: the receiver's NICs


def _flow(ok: bool = True, delivered: int = 71_000) -> dict:
    timeline = [t for t in STALLED if t[1] <= delivered]
    return {"src": 0, "dst": 3, "bytes": 71_000, "ok": ok, "timeline": timeline,
            "start": 100.0, "completion_s": 1.5 if ok else None, "goodput_bps": 378_666.0}


def _run(**scenario_overrides) -> dict:
    sc = {"ok": True, "error": None, "wall_s": 3.0, "fabric": {"planes": 4},
          "network": {"port_rate_pps": 500, "base_rtt_s": 0.017},
          "capacity_pps": 2000.0,
          "contenders": {
              "mrc": {"clean": {"flows": [_flow()], "summary": {"ok": True}},
                      "failed": {"flows": [_flow()], "summary": {"ok": True}},
                      "stall_rtts": 47.6, "completion_failed_s": 1.5, "failure_at_s": 0.6},
              "mptcp": {"skipped": "sysctl net.mptcp.enabled is not 1"}},
          "figures": {"x": 1.0},
          "targets": [{"figure": "MRC stall", "target": "< 5", "measured": 47.6,
                       "met": False}]}
    sc.update(scenario_overrides)
    return {"schema": 1, "command": ["python", "-m", "bench", "link-failure"],
            "started": "2026-01-01T00:00:00+00:00", "quick": True, "target": "soft",
            "environment": results.environment(), "scenarios": {"link-failure": sc}}


def test_validate_accepts_a_complete_run() -> None:
    assert results.validate(_run()) == []


@pytest.mark.parametrize("override, problem", [
    ({"ok": False, "error": "boom"}, "not ok: boom"),
    ({"capacity_pps": math.inf}, "not finite"),
    ({"wall_s": -1.0}, "negative"),
    ({"targets": [{"figure": "x"}]}, "malformed target"),
])
def test_validate_reports_problems(override: dict, problem: str) -> None:
    found = results.validate(_run(**override))
    assert any(problem in p for p in found), found


def test_validate_catches_missing_keys_and_inconsistent_flows() -> None:
    run = _run()
    del run["scenarios"]["link-failure"]["figures"]
    run["scenarios"]["link-failure"]["contenders"]["mrc"]["clean"]["flows"] = [_flow(delivered=30)]
    found = results.validate(run)
    assert any("missing figures" in p for p in found)
    assert any("timeline does not reach its size" in p for p in found)


def test_environment_describes_the_machine() -> None:
    env = results.environment()
    assert len(env["git_commit"]) == 40
    assert env["nproc"] >= 1 and env["memory_bytes"] > 0
    assert env["python"].count(".") == 2


def test_summary_and_plots_from_synthetic_results(tmp_path: Path) -> None:
    run = _run()
    run["scenarios"]["permutation"] = {
        "contenders": {"mrc": {"flows": [_flow(), _flow(ok=False, delivered=30_000)],
                               "summary": {"ok": False, "aggregate_over_capacity": 0.5,
                                           "completion_s": {"max": 1.5}}}}}
    run["scenarios"]["allreduce"] = {"contenders": {
        "mrc": {"ok": True, "step_times_s": [0.1, 0.12, 0.5],
                "step_time_s": metrics.distribution([0.1, 0.12, 0.5])}}}
    text = results.summary_markdown(run)
    assert "| mrc | 1.5 s | 1 | 47.6 | yes |" in text
    assert "skipped: sysctl net.mptcp.enabled is not 1" in text
    assert "| MRC stall | < 5 | 47.6 | no |" in text
    written = plots.plot_run(run, tmp_path)
    assert sorted(p.name for p in written) == ["allreduce-steps.png", "link-failure-goodput.png",
                                               "permutation-flows.png"]
    for p in written:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    out = results.write(run, tmp_path / "r")
    assert json.loads(out.read_text())["scenarios"].keys() == run["scenarios"].keys()


def test_summary_says_when_agents_hold_between_wakeups() -> None:
    assert "hold" not in results.summary_markdown(_run())
    held = _run(network={"port_rate_pps": 500, "base_rtt_s": 0.017, "rx_hold_ms": 3.0})
    assert "agents hold 3 ms between wake-ups." in results.summary_markdown(held)


@pytest.mark.parametrize("bad", ["-1", "101", "x"])
def test_bench_refuses_a_hold_out_of_range(bad: str) -> None:
    from bench.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["loss", "--rx-hold-ms", bad])
    assert parse_args(["loss", "--rx-hold-ms", "2.5"]).rx_hold_ms == 2.5


def test_bench_runs_a_list_of_scenarios_in_its_own_order() -> None:
    from bench.__main__ import SCENARIOS, parse_args

    assert parse_args(["all"]).scenarios == list(SCENARIOS)
    assert parse_args(["loss,permutation,loss"]).scenarios == ["permutation", "loss"]
    assert parse_args(["incast"]).scenarios == ["incast"]


@pytest.mark.parametrize("bad", ["", ",", "los", "loss,nope", "all,loss"])
def test_bench_refuses_an_unknown_scenario(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args([bad])
    assert "scenario: unknown" in capsys.readouterr().err


def _flows(ok: bool) -> dict:
    """A contender run as bench.context.run_one records it (flows, summary, verdict)."""
    return {"flows": [{"src": 0, "dst": 3, "ok": ok}], "summary": {"flows": 1, "ok": ok},
            "fidelity": {"verdict": "ok"}}


def _steps(ok: bool) -> dict:
    """An all-reduce contender run (bench.experiments.allreduce): no flow summary, its ok at the
    top."""
    return {"ok": ok, "steps": 5, "completed_steps": 5 if ok else 2, "fidelity": {}}


@pytest.mark.parametrize("run", [
    _steps(False),  # an all-reduce that did not finish
    {"fidelity": {"verdict": "ok"}},  # neither a summary nor a verdict of its own
    {"clean": _flows(True), "failed": {"fidelity": {}}},  # a failure run that measured nothing
], ids=["allreduce-failed", "no-verdict", "failure-run-unmeasured"])
@pytest.mark.parametrize("contender", ["roce", "roce:16", "tcp"])
def test_bench_fails_a_non_mrc_contender_run_without_a_summary(contender: str,
                                                               run: dict) -> None:
    from bench.__main__ import _all_ok

    assert not _all_ok({"contenders": {"mrc": _steps(True), contender: run}})


def test_bench_ok_for_runs_that_report_success_or_may_not_finish() -> None:
    from bench.__main__ import _all_ok

    assert _all_ok({"contenders": {}})  # a scenario skipped as a whole
    assert _all_ok({"contenders": {"mrc": _steps(True), "roce": _steps(True),
                                   "roce:16": _steps(True)}})
    assert _all_ok({"contenders": {"mrc": _flows(True), "roce": _flows(True),
                                   "mptcp": {"skipped": "mptcp is not enabled"}}})
    # a single-plane contender that cannot finish once its path is gone: the measurement
    assert _all_ok({"contenders": {"mrc": {"clean": _flows(True), "failed": _flows(True)},
                                   "roce": {"clean": _flows(True), "failed": _flows(False)}}})
    # but MRC must always finish, and every clean run must
    assert not _all_ok({"contenders": {"mrc": {"clean": _flows(True), "failed": _flows(False)}}})
    assert not _all_ok({"contenders": {"roce": {"clean": _flows(False), "failed": _flows(True)}}})
    assert not _all_ok({"contenders": {"mrc": _steps(False)}})
    assert not _all_ok({"contenders": {"tcp": _flows(False)}})


def test_goodput_bins_follow_the_run_not_the_emulations_floor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated run lasts milliseconds with a timeline point per write: its bins are the
    sparsest timeline's spacing, not the emulation's 100 ms floor (one bin, no curve)."""
    widths: list[float] = []
    series = metrics.goodput_series
    monkeypatch.setattr(plots.metrics, "goodput_series",
                        lambda tl, width, span: widths.append(width) or series(tl, width, span))
    timeline = [[0.0, 0], *([k * 0.25e-3, k * 262144] for k in range(1, 9))]  # 2 ms, 8 writes
    flow = {"timeline": timeline}
    contenders = {"mrc": {"failed": {"flows": [flow]}, "failure_at_s": 1e-3}}
    plots.goodput_over_time("victim", contenders, tmp_path / "sim.png", 0.0)
    plots.goodput_over_time("victim", contenders, tmp_path / "emu.png")
    assert widths == [pytest.approx(0.25e-3), plots.MIN_BIN_S]
