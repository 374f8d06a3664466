"""The soak command on the software switch, short (`python -m bench.costs.soak --quick`): mutated
frames into a live agent and a live switch, link flapping, a killed spine and a killed
receiving agent, each with
transfers running; every transfer verified, nothing crashed, memory of the switch bounded."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(shutil.which("mnexec") is None, reason="needs Mininet")]


def test_quick_soak_verifies_every_transfer_and_nothing_crashes(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, "-m", "bench.costs.soak", "--quick", "--target", "soft",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=840)
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    summary, phases = result["summary"], result["phases"]
    assert proc.returncode == 0, (summary, proc.stderr[-2000:])
    assert summary["inputs_tried"] >= 2 * 19_000  # a few frames may be too long to send
    assert summary["crashed"] == [] and summary["transfers_verified"] == summary["transfers"]
    assert summary["leftovers"] == 0, result["leftovers"]
    assert phases["mutated"]["agent_refused"] > 1000  # the frames did reach the agent
    assert phases["flap"]["flaps"] >= 10 and phases["kill-switch"]["killed_pid"]
    killed = phases["kill-switch"]  # a shared software switch crashes and reboots in its process
    assert killed["down_after_kill"] and not killed["down_after_reboot"], killed
    assert killed["restarted_pid"] is not None
    # a killed and restarted receiver: its write ends at once, then both ways work again
    assert phases["kill-agent"]["killed_pid"] and len(phases["kill-agent"]["transfers"]) == 2
    assert summary["interrupted_write_ended_s"] < 30, phases["kill-agent"]["interrupted"]
    before, after = summary["switch_rss_kib"]
    assert after < before + 50 * 1024, summary  # no growth beyond 50 MiB under bad frames
