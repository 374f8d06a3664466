"""bench.costs.forwarding: one run measures the targets side by side and reports consistent
figures. Structure and arithmetic only: the rates depend on the machine and its load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.costs.forwarding import summarise
from tests.support import require_bmv2

REPO = Path(__file__).resolve().parents[2]


def test_summary_medians_and_ratios() -> None:
    row = {"delivered_pps": 100, "cpu_us_per_packet": 10.0, "rss_mb_busy": 40.0,
           "sent_pps": 1000, "lost": 5}
    runs = {"soft": [row, {**row, "delivered_pps": 300}, {**row, "delivered_pps": 200}],
            "bmv2": [{**row, "delivered_pps": 50, "cpu_us_per_packet": 40.0}]}
    out = summarise(runs)
    assert out["soft"]["delivered_pps"] == {"median": 200, "min": 100, "max": 300}
    assert out["soft_over_bmv2"] == {"delivered_pps": 4.0, "cpu_us_per_packet": 0.25,
                                     "rss_mb_busy": 1.0}


def _run(*args: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "bench.costs.forwarding", "--seconds", "1",
                             "--repeat", "1", "--json", *args], cwd=REPO, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and raw sockets need root")
def test_soft_run_delivers_and_reports() -> None:
    report = _run("--target", "soft")
    (run,) = report["runs"]["soft"]
    assert run["delivered"] > 0 and run["sent"] >= run["delivered"]
    assert run["cpu_us_per_packet"] > 0 and run["rss_mb_busy"] > 0
    assert report["summary"]["soft"]["delivered_pps"]["median"] == run["delivered_pps"]


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and raw sockets need root")
def test_both_targets_side_by_side() -> None:
    require_bmv2(("simple_switch_grpc", "p4c-bm2-ss"))
    report = _run("--target", "both")
    soft, bmv2 = report["runs"]["soft"][0], report["runs"]["bmv2"][0]
    assert soft["delivered"] > 0 and bmv2["delivered"] > 0
    ratio = report["summary"]["soft_over_bmv2"]["delivered_pps"]
    assert ratio == round(soft["delivered_pps"] / bmv2["delivered_pps"], 2)
