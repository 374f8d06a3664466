"""The run manifest: PIDs are recognised by start time, writes are atomic, and cleaning up
after a dead run removes exactly what it recorded (a child process, a veth)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from safety.privdir import PrivateDir
from safety.runstate import (
    RunManifest,
    RunStateError,
    acquire_fabric_lock,
    clean_leftovers,
    deferred_signals,
    lock_holder,
    same_process,
    start_time,
    terminate_as_interrupt,
)

REPO = Path(__file__).resolve().parents[3]


def test_start_time_identifies_a_process_not_just_its_pid() -> None:
    started = start_time(os.getpid())
    assert started is not None and same_process(os.getpid(), started)
    assert not same_process(os.getpid(), started + 1)  # a recycled PID starts at another time
    assert start_time(2**22 + 7) is None  # above pid_max: no such process


@pytest.fixture
def rundir(tmp_path: Path):
    with PrivateDir(tmp_path / "run") as d:
        yield d


def test_manifest_round_trip_and_atomic_save(tmp_path: Path, rundir: PrivateDir) -> None:
    path = rundir.path / "run.json"
    m = RunManifest(tmp_path / "work", True, rundir)
    m.add_pid(os.getpid())
    m.add_interfaces(["s1-eth1", "s1-eth2"])
    m.add_interfaces(["s1-eth1"])
    data = json.loads(path.read_text())
    assert data["pids"] == [[os.getpid(), start_time(os.getpid())]]
    assert data["interfaces"] == ["s1-eth1", "s1-eth2"]
    assert [p.name for p in rundir.path.iterdir()] == ["run.json"]  # no temp file left
    m.remove()
    assert not path.exists()


def _dead_owner(rundir: PrivateDir) -> None:
    """Make the manifest's owner a process that has exited (as after kill -9)."""
    child = subprocess.Popen(["true"])
    child.wait()
    data = json.loads(rundir.read_bytes("run.json"))
    data["owner"] = [child.pid, 1]
    rundir.write_bytes("run.json", json.dumps(data).encode())


@pytest.mark.skipif(os.geteuid() != 0, reason="creates a veth: needs root")
def test_leftovers_of_a_dead_run_are_removed_exactly(tmp_path: Path,
                                                     rundir: PrivateDir) -> None:
    path = rundir.path / "run.json"
    workdir = tmp_path / "work"
    workdir.mkdir()
    leftover = subprocess.Popen(["sleep", "60"])
    bystander = subprocess.Popen(["sleep", "60"])
    name = f"mrct{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p"],
                   check=True)
    try:
        m = RunManifest(workdir, True, rundir)
        m.add_pid(leftover.pid)
        m.add_interfaces([name, "mrct-never-made"])
        _dead_owner(rundir)
        lines: list[str] = []
        found = clean_leftovers(lines.append, rundir)
        assert found == {"processes": 1, "interfaces": 1}
        assert leftover.wait(5) == -signal.SIGKILL
        assert bystander.poll() is None  # not recorded: untouched
        assert not Path(f"/sys/class/net/{name}").exists()
        assert not Path(f"/sys/class/net/{name}p").exists()  # the pair went with it
        assert not workdir.exists() and not path.exists()
        assert "1 processes, 1 interfaces" in lines[0]
        assert clean_leftovers(lines.append, rundir) is None  # nothing the second time
    finally:
        for proc in (leftover, bystander):
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


def test_a_live_owners_manifest_is_left_alone(tmp_path: Path, rundir: PrivateDir) -> None:
    owner = subprocess.Popen(["sleep", "60"])
    try:
        RunManifest(tmp_path, False, rundir)
        data = json.loads(rundir.read_bytes("run.json"))
        data["owner"] = [owner.pid, start_time(owner.pid)]
        rundir.write_bytes("run.json", json.dumps(data).encode())
        lines: list[str] = []
        assert clean_leftovers(lines.append, rundir) is None
        assert rundir.exists("run.json") and "still runs" in lines[0]
    finally:
        owner.kill()
        owner.wait()


def test_signals_wait_for_the_block_and_a_second_one_escalates() -> None:
    escalated: list[bool] = []
    finished = []
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when pytest runs in the background
    with pytest.raises(KeyboardInterrupt), deferred_signals(lambda: escalated.append(True)):
        os.kill(os.getpid(), signal.SIGINT)
        finished.append("after first")
        os.kill(os.getpid(), signal.SIGTERM)
        finished.append("after second")
    assert finished == ["after first", "after second"] and escalated == [True]
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_the_fabric_lock_names_its_holder_to_whoever_waits(rundir: PrivateDir) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from safety.privdir import PrivateDir; "
         "from safety.runstate import acquire_fabric_lock; "
         "acquire_fabric_lock(5, rundir=PrivateDir(Path(sys.argv[1]))); "
         "print('held', flush=True); time.sleep(60)", str(rundir.path)],
        stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said: list[str] = []
        with pytest.raises(RunStateError, match=rf"after 1 s: PID {holder.pid} \(.*-c import sys"):
            acquire_fabric_lock(0.6, log=said.append, rundir=rundir)
        assert said and f"PID {holder.pid}" in said[0]
    finally:
        holder.kill()
        holder.wait()
    fd = acquire_fabric_lock(1.0, log=said.append, rundir=rundir)
    try:
        assert lock_holder(rundir).startswith(f"PID {os.getpid()} (")
    finally:
        os.close(fd)
    rundir.write_bytes("fabric.lock", b"garbage")
    assert lock_holder(rundir) == "holder unknown"


def test_sigterm_unwinds_like_ctrl_c() -> None:
    """The demo and the grader's inner process stop their networks on SIGTERM: the signal
    raises KeyboardInterrupt, so `finally` clauses run."""
    previous = signal.getsignal(signal.SIGTERM)
    unwound = False
    try:
        terminate_as_interrupt()
        with pytest.raises(KeyboardInterrupt):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler runs before this returns
            finally:
                unwound = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert unwound
