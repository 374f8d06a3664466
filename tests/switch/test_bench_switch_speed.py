"""bench.costs.switch_speed: the summary arithmetic, one live run, and --vs with its temporary
worktree. Structure only: the CPU figures depend on the machine and its load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.costs.switch_speed import format_summary, summarise

REPO = Path(__file__).resolve().parents[2]


def _row(ms: float | None, delivered: int = 100) -> dict:
    return {"cpu_ms_per_1000": ms, "delivered": delivered, "frames": 100}


def test_summary_medians_and_ratio() -> None:
    runs = {"old": [_row(40.0), _row(60.0), _row(50.0)], "new": [_row(20.0), _row(30.0, 99)]}
    out = summarise(runs, "old", "new")
    assert out["old"] == {"median": 50.0, "min": 40.0, "max": 60.0, "delivered": 300,
                          "frames": 300}
    assert out["new"]["median"] == 25.0 and out["new"]["delivered"] == 199
    assert out["new_over_old"] == 0.5
    assert "new_over_old" not in summarise({"new": [_row(None, 0)]}, None, "new")
    report = {"args": {"frames": 100, "rate": 10.0, "limit": 20.0, "repeat": 3,
                       "burst": 1},
              "labels": ["old", "new"], "load_before": 0.1, "load_after": 0.2,
              "summary": out}
    text = format_summary(report)
    assert "old: 50.0 ms (min 40.0, max 60.0), delivered 300/300" in text
    assert text.endswith("new / old: 0.5")


def _run(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "report.json"
    result = subprocess.run([sys.executable, "-m", "bench.costs.switch_speed", "--frames", "400",
                             "--repeat", "1", "--json", str(out), *args], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ms (min" in result.stdout
    return json.loads(out.read_text())


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and raw sockets need root")
def test_live_run_delivers_every_frame(tmp_path: Path) -> None:
    report = _run(tmp_path)
    (label,) = report["labels"]
    (run,) = report["runs"][label]
    assert run["delivered"] == run["frames"] == 400
    assert run["switch_tx"] >= 400 and run["cpu_ms_per_1000"] > 0  # schedstat ns: never 0
    assert report["summary"][label]["median"] == run["cpu_ms_per_1000"]


def _worktrees() -> str:
    return subprocess.run(["git", "-C", str(REPO), "worktree", "list"], capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and raw sockets need root")
def test_vs_runs_both_and_removes_its_worktree(tmp_path: Path) -> None:
    report = _run(tmp_path, "--vs", "HEAD")
    old, new = report["labels"]
    assert old == report["old"] and new == report["new"] and old != new
    assert all(report["runs"][label][0]["delivered"] == 400 for label in (old, new))
    assert "new_over_old" in report["summary"]
    assert "switch-speed-" not in _worktrees()
