"""`python -m bench.costs.agent_speed --vs HEAD`, small: both trees measured, the report complete
and sane, the temporary worktree gone afterwards. Checks structure, never speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.support import skip_reason

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 600  # about half a minute alone; the rest is waiting for other fabrics

pytestmark = [pytest.mark.timeout(RUN_TIMEOUT_S + 120),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


def _worktrees() -> set[str]:
    out = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return {line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")}


def test_agent_speed_vs_head(tmp_path: Path) -> None:
    before = _worktrees()
    out = tmp_path / "speed.json"
    proc = subprocess.run([sys.executable, "-m", "bench.costs.agent_speed", "--vs", "HEAD",
                           "--bytes", "300000", "--runs", "1", "--rate", "500",
                           "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _worktrees() == before, "the temporary worktree was left behind"
    report = json.loads(out.read_text())
    assert set(report["median_ms_per_1000"]) == {"old", "new"}
    assert (report["chunk"], report["depth"]) == (16 * 1024, 8)  # as the bench's flows write
    assert report["port_rate_pps"] == 500 and "ports at 500 packets/s" in proc.stdout
    assert [r["tree"] for r in report["runs"]] == ["old", "new"]
    for run in report["runs"]:
        assert run["verified"], run
        for role in ("sender", "receiver"):
            stats = run[role]
            assert stats["packets"] == stats["tx_packets"] + stats["rx_packets"] > 0
            assert stats["cpu_ms"] > 0 and stats["ms_per_1000"] is not None
            # schedstat's total against /proc/PID/stat's, two 10 ms ticks per field apart at most
            assert abs(stats["cpu_ms"] - stats["user_ms"] - stats["sys_ms"]) <= 40, stats
        assert run["sender"]["tx_data_packets"] >= 300000 // 1024
    assert set(report["ratio_old_over_new"]) == {"sender", "receiver", "both"}
    assert "ratio old/new" in proc.stdout


def test_agent_speed_refuses_a_rate_that_is_not_positive() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.costs.agent_speed", "--rate", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "positive rate" in proc.stderr
