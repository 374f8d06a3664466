"""bench.simulated.sim_scale: the paper's scale figures from simulator runs, in --quick form."""

from __future__ import annotations

import json

import pytest

from bench.simulated import sim_scale


def test_quick_scale_run_reports_the_papers_figures(tmp_path) -> None:
    out = tmp_path / "scale.json"
    assert sim_scale.main(["--quick", "--json", str(out), "--plot", str(tmp_path)]) == 0
    report = json.loads(out.read_text())
    s = report["summary"]
    assert [b["hosts"] for b in s["bypass"]] == [4]
    assert 0 < s["bypass"][0]["recovery_rtts"] < 2.0
    perm = s["permutation"]["default"]
    assert perm["ok"] and 0.5 < perm["mrc_share_of_capacity"] <= 1.0
    # every RoCE-like contender finishes its last flow later than MRC on this fabric
    assert perm["p100_over_mrc"] and all(v > 1.0 for v in perm["p100_over_mrc"].values())
    steps = s["allreduce"]
    assert steps["allreduce"]["mean_over_clean"] == 1.0
    assert steps["allreduce-flap"]["flaps"] > 0
    assert steps["allreduce-reboot"]["mean_over_clean"] >= 1.0
    # the hierarchical all-reduce, on its own 9-host fabric (3 T0s of 3 hosts)
    assert steps["allreduce-2d"]["mean_over_clean"] == 1.0 and steps["allreduce-2d"]["ok"]
    assert steps["allreduce-2d-reboot"]["hosts"] == 9
    assert steps["allreduce-2d-reboot"]["step_time_over_first"][1] > 1.0
    assert steps["allreduce-2d-flap"]["ok"]
    for run in report["runs"]["permutation"]:
        assert "data_tx_per_plane" not in run and run["p100_s"] > 0  # per-host arrays dropped
    assert (tmp_path / "sim-bypass-rtts.png").stat().st_size > 0
    assert (tmp_path / "sim-permutation-p100.png").stat().st_size > 0


def test_summary_text_names_every_figure() -> None:
    summary = {"bypass": [{"fabric": "hosts-16", "hosts": 16, "recovery_rtts": 1.4}],
               "permutation": {"hosts-16": {"hosts": 16, "p100_over_mrc": {"roce:8": 2.5},
                                            "share_of_capacity": {"mrc": 0.7}}},
               "allreduce": {"allreduce-flap": {"mean_over_clean": 1.02, "flaps": 3,
                                                "hosts": 16}}}
    text = sim_scale.summary_text(summary)
    assert "1.40 RTTs" in text and "roce:8 2.50x" in text and "1.020, 3 flaps" in text
    assert "allreduce-flap (16 hosts)" in text


def test_parts_run_alone_and_unknown_parts_are_refused(tmp_path, capsys) -> None:
    out = tmp_path / "scale.json"
    assert sim_scale.main(["--quick", "--parts", "bypass", "--json", str(out),
                           "--plot", str(tmp_path)]) == 0
    report = json.loads(out.read_text())
    assert list(report["runs"]) == ["bypass"] and report["summary"]["allreduce"] == {}
    assert not (tmp_path / "sim-permutation-p100.png").exists()  # no permutation, no plot
    with pytest.raises(SystemExit) as exc:
        sim_scale.main(["--parts", "bypass,nonsense"])
    assert exc.value.code == 2
    assert "choose from" in capsys.readouterr().err
