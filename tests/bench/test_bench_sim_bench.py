"""bench.simulated.sim_bench: the bench's scenarios in the simulator, in the bench's results
format, so bench.results and bench.plots read them as they read an emulated run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import results
from bench.simulated import sim_bench

SIZE = 256 * 1024


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("simbench")
    code = sim_bench.main(["link-failure,permutation,allreduce", "--contenders",
                           "mrc,roce,tcp", "--size", str(SIZE), "--out", str(out),
                           "--json", str(out / "copy.json")])
    assert code == 0
    data = json.loads((out / "results.json").read_text())
    data["_out"] = str(out)
    return data


def test_the_results_file_is_a_bench_results_file(run: dict) -> None:
    assert results.validate(run) == [] and run["target"] == "sim"
    out = Path(run["_out"])
    summary = (out / "summary.md").read_text()
    for name in ("## link-failure", "## permutation", "## allreduce", "| mrc |",
                 "kernel TCP is not simulated"):
        assert name in summary
    for plot in ("link-failure-goodput.png", "permutation-flows.png", "allreduce-steps.png"):
        assert (out / plot).stat().st_size > 0


def test_failures_compare_clean_and_failed_runs_as_the_bench_does(run: dict) -> None:
    lf = run["scenarios"]["link-failure"]
    mrc, roce = lf["contenders"]["mrc"], lf["contenders"]["roce"]
    assert mrc["healthy_route_retirements"] == 0 and mrc["failed_route_retirements"] > 0
    assert mrc["completion_ratio"] < 1.5 and mrc["retire_rtts"] < 5
    # roce's QP on the dead link waits for the baseline's routing (3 s hold), MRC does not
    assert roce["completed"] and roce["completion_failed_s"] > 3.0
    assert roce["completion_ratio"] > 100 * mrc["completion_ratio"]
    assert lf["network"]["port_rate_pps"] > 0 and lf["fabric"]["hosts"] == 4
    assert 0 < mrc["failure_at_s"] < mrc["completion_failed_s"]  # the plot's dashed line


def test_permutation_and_allreduce_figures(run: dict) -> None:
    perm = run["scenarios"]["permutation"]
    assert perm["figures"]["p100_roce_over_mrc"] > 1.0
    assert 0 < perm["figures"]["mrc"]["aggregate_over_capacity"] <= 1.0
    steps = run["scenarios"]["allreduce"]["contenders"]["mrc"]["step_times_s"]
    assert len(steps) == 3 and min(steps) > 0


def test_scenarios_the_simulator_lacks_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        sim_bench.main(["startup"])
    assert "not simulated: startup" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sim_bench.main(["loss", "--contenders", "mrc,nonsense"])


def test_victim_is_the_bench_victim_record(tmp_path: Path) -> None:
    """The victim alone and beside the incast, as the bench records it (clean / failed), with
    its figure and target; the summary names the simulated links, not emulated CPUs."""
    code = sim_bench.main(["victim", "--contenders", "mrc,roce", "--size", str(2 * 1024 * 1024),
                           "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert results.validate(data) == []
    sc = data["scenarios"]["victim"]
    mrc, roce = sc["contenders"]["mrc"], sc["contenders"]["roce"]
    assert len(mrc["clean"]["flows"]) == 1 and len(mrc["failed"]["flows"]) == 8
    assert mrc["failed"]["flows"][0]["src"] == 11 and mrc["failed"]["flows"][0]["dst"] == 1
    assert sc["figures"]["mrc"]["victim_over_clean"] == mrc["victim_over_clean"] > 0.75
    assert roce["victim_over_clean"] < 0.5 * mrc["victim_over_clean"]
    assert sc["targets"][0]["figure"] == "MRC victim goodput with incast / alone"
    assert sc["network"]["convergence_delay_s"] == 3.0
    summary = (tmp_path / "summary.md").read_text()
    assert "Simulated links of 1e+10 bit/s" in summary and "CPUs busy" not in summary
