"""Interrupting `two_tier.py` at random moments leaves nothing behind, and a run killed with
SIGKILL is cleaned up by the next start at once (issue 13, item 8). The leftovers checked are
exactly what the run recorded in its manifest (safety/runstate.py): its PIDs (by start
time), its switch interfaces and its work directory."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from emulation.network import existing_interface
from fabric.topology import Fabric
from safety.runstate import manifest_path, same_process
from tests.e2e.support import run_workdirs, skip_reason

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "topologies" / "two_tier.py"
FABRIC = Fabric(4, 2, 2, 2)  # two_tier.py's default
RUN_TIMEOUT_S = 240

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


class Run:
    """two_tier.py in the background, its output lines collected with their arrival time."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-X", "faulthandler", str(SCRIPT),
                                      "--no-cli", "--target",
                                      "soft", *args], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip()))

    def wait_line(self, text: str, timeout: float = RUN_TIMEOUT_S, *,
                  at_start: bool = False) -> float:
        """When the first line containing `text` (beginning with it: at_start) arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if line.startswith(text) if at_start else text in line:
                    return at
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line with {text!r}: {self.output()[-2000:]}")

    def finish(self, timeout: float = RUN_TIMEOUT_S) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            self.proc.wait(30)
            self._reader.join(5)
            raise AssertionError(f"two_tier.py hung: {self.output()[-6000:]}") from None
        self._reader.join(5)
        return code

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)


def recorded() -> dict:
    try:
        return json.loads(manifest_path().read_text())
    except FileNotFoundError:
        return {"pids": [], "interfaces": [], "workdir": "", "own_workdir": False}


def alive(manifest: dict) -> list[int]:
    return [pid for pid, started in manifest["pids"] if same_process(pid, started)]


def assert_nothing_left(manifest: dict) -> None:
    assert not manifest_path().exists(), manifest_path().read_text()
    assert alive(manifest) == []
    assert existing_interface(FABRIC) is None
    for table in manifest.get("nft_tables", []):  # the run's control-port shield
        listed = subprocess.run(["nft", "list", "table", "inet", table], capture_output=True)
        assert listed.returncode != 0, f"shield table {table} left behind"
    if manifest["own_workdir"]:
        assert not Path(manifest["workdir"]).exists()


def _cleanup(run: Run | None, manifest: dict) -> None:
    """After a failed assertion: remove what this test's runs own, by PID and by name."""
    if run is not None and run.proc.poll() is None:
        run.proc.kill()
        run.proc.wait()
    for pid in alive(manifest):
        os.kill(pid, signal.SIGKILL)
    for name in manifest["interfaces"]:
        if Path(f"/sys/class/net/{name}").exists():
            subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


def test_sigint_at_random_moments_leaves_nothing_and_the_next_run_starts_at_once() -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    # (arguments, the line the interrupt is timed from, delay range after it, signals)
    plans = [((("--no-demo",), "", (0.5, 6.0), 1)),
             ((("--no-demo",), "fabric up", (0.0, 1.5), 1)),
             ((("--no-demo",), "", (1.0, 6.0), 2)),
             (((), "transfer h", (0.0, 2.5), 1))]  # the case: just after the report
    manifest: dict = recorded()
    run: Run | None = None
    workdirs = run_workdirs()
    try:
        for args, mark, (low, high), signals in plans:
            run = Run(*args)
            start = run.wait_line(mark) if mark else time.monotonic()
            time.sleep(max(0.0, start + rng.uniform(low, high) - time.monotonic()))
            manifest = recorded()
            for _ in range(signals):
                if run.proc.poll() is None:
                    run.proc.send_signal(signal.SIGINT)
                    time.sleep(0.2)
            code = run.finish()
            manifest = {**manifest, "pids": manifest["pids"] or recorded()["pids"]}
            assert code in (0, 130), (code, run.output()[-2000:])
            assert "waiting for" not in run.output(), run.output()
            assert_nothing_left(manifest)
            assert run_workdirs() <= workdirs, run.output()[-2000:]
    finally:
        _cleanup(run, manifest)


# When the run is killed: while its calibration network is up (its rate is "auto"), or once
# its own fabric is (that line is the first to begin "fabric up").
KILL_MOMENTS = {"calibrating": ("calibration: fabric up", False), "running": ("fabric up", True)}


@pytest.mark.parametrize("moment", sorted(KILL_MOMENTS))
def test_a_killed_run_is_cleaned_up_by_the_next_start(moment: str) -> None:
    text, at_start = KILL_MOMENTS[moment]
    workdirs = run_workdirs()
    killed = Run()
    manifest: dict = recorded()
    nxt: Run | None = None
    try:
        killed.wait_line(text, at_start=at_start)
        manifest = recorded()
        killed.proc.send_signal(signal.SIGKILL)
        killed.finish()
        assert alive(manifest), "the killed run's processes should still be there"
        assert existing_interface(FABRIC) is not None
        start = time.monotonic()
        nxt = Run("--no-demo")
        assert nxt.finish() == 0, nxt.output()[-2000:]
        assert time.monotonic() - start < 60
        assert "cleaned up after a run that was killed" in nxt.output(), nxt.output()
        assert "waiting for" not in nxt.output()
        assert_nothing_left(manifest)
        # calibrating, the run had made no work directory yet; running, the next start
        # removed the one its manifest names: none is left either way
        assert run_workdirs() <= workdirs
    finally:
        _cleanup(killed, manifest)
        _cleanup(nxt, recorded())
