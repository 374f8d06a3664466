"""sandbox.contain contains what it runs: each test runs a tiny Python script inside and checks
from the host that the script's attempt stayed inside (files, processes, network, limits).

The scripts print one JSON line with what they saw; the host side never trusts it alone and
looks for itself (the file is absent, the process is alive, the listener got no connection).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from sandbox import contain

pytestmark = pytest.mark.timeout(60)
VENV = Path(sys.prefix)
PYTHON = str(VENV / "bin" / "python")
FAST = replace(contain.DEFAULT_LIMITS, wall_s=20.0, output_bytes=64 << 10)


@dataclass
class Box:
    root: Path  # a 0711 mkdtemp folder under /tmp holding copy/ and results/
    copy: Path
    results: Path

    def run(self, code: str, *, live: bool = False, **limits: float) -> contain.SandboxResult:
        return contain.run([PYTHON, "-c", code], copy=self.copy, results=self.results,
                           venv=VENV, env={"PYTHONPATH": str(self.copy)},
                           limits=replace(FAST, **limits), live=live)


@pytest.fixture
def box() -> Iterator[Box]:
    why = contain.available()
    if why:
        pytest.skip(f"the sandbox cannot run here: {why}")
    root = Path(tempfile.mkdtemp(prefix="mrc-sandbox-test-"))
    try:
        root.chmod(0o711)
        copy, results = root / "copy", root / "results"
        (copy / "p4src").mkdir(parents=True)
        (copy / "module.py").write_text("VALUE = 1\n")
        results.mkdir()
        yield Box(root, copy, results)
    finally:
        shutil.rmtree(root)


def seen(result: contain.SandboxResult) -> dict:
    """The script's JSON line (its last line of stdout)."""
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


ATTEMPT = """
import json, os, sys
def attempt(f, *a):
    try:
        return repr(f(*a))
    except BaseException as exc:
        return type(exc).__name__
"""


def test_writes_outside_results_leave_nothing_on_the_host(box: Box) -> None:
    outside = Path(tempfile.mkdtemp(prefix="mrc-sandbox-outside-"))
    try:
        outside.chmod(0o777)  # were it visible, nothing but the sandbox would stop the write
        targets = [outside / "planted", box.copy / "planted", box.copy / "p4src/build/x",
                   box.copy / "module.py"]
        r = box.run(ATTEMPT + f"print(json.dumps([attempt(lambda p: open(p, 'a').write('x'), p)"
                    f" for p in {[str(t) for t in targets]!r}]))")
        outcome = seen(r)
        assert outcome[:2] == ["FileNotFoundError", "OSError"]  # not there; read-only copy
        assert outcome[2] == "1"  # the scratch tmpfs takes it, and forgets it
        assert outcome[3] in ("OSError", "PermissionError")  # read-only, and not its file
        assert not (outside / "planted").exists() and not (box.copy / "planted").exists()
        assert list((box.copy / "p4src/build").iterdir()) == []
        assert (box.copy / "module.py").read_text() == "VALUE = 1\n"
    finally:
        shutil.rmtree(outside)


def test_a_result_file_is_written_and_read_back_safely(box: Box) -> None:
    r = box.run(f"import os; open('{box.results}/out.json', 'w').write('{{\"ok\": 1}}');"
                f"os.symlink('/etc/hostname', '{box.results}/evil'); print('{{}}')")
    seen(r)
    assert json.loads(contain.read_result(box.results, "out.json", 1000)) == {"ok": 1}
    if os.geteuid() == 0:
        assert (box.results / "out.json").stat().st_uid == contain.SANDBOX_UID
    with pytest.raises(OSError):  # ELOOP: the grader never follows the sandbox's symlinks
        contain.read_result(box.results, "evil", 1000)
    with pytest.raises(contain.SandboxError):
        contain.read_result(box.results, "out.json", 5)


def test_host_files_outside_the_binds_cannot_be_read(box: Box) -> None:
    secret_dir = Path(tempfile.mkdtemp(prefix="mrc-sandbox-secret-"))
    try:
        secret_dir.chmod(0o755)
        secret = secret_dir / "secret"
        secret.write_text("s3cret")
        secret.chmod(0o644)
        this_file = Path(__file__).resolve()  # the checkout itself: only its venv is bound
        paths = [str(secret), str(this_file), "/root", "/home", "/var/log"]
        r = box.run(ATTEMPT + f"print(json.dumps([attempt(lambda p: os.listdir(p) if "
                    f"os.path.isdir(p) else open(p).read(), p) for p in {paths!r}]))")
        assert seen(r) == ["FileNotFoundError"] * len(paths)
    finally:
        shutil.rmtree(secret_dir)


def test_the_environment_is_only_what_the_caller_passes(box: Box,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRC_SANDBOX_HOST_ONLY", "leaked")
    r = box.run("import json, os; print(json.dumps(dict(os.environ)))")
    env = seen(r)
    assert "MRC_SANDBOX_HOST_ONLY" not in env
    assert set(env) == {*contain.DEFAULT_ENV, "PYTHONPATH", "PWD"}
    assert env["PYTHONPATH"] == str(box.copy) and env["HOME"] == contain.HOME


def test_host_processes_cannot_be_signalled(box: Box) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        r = box.run(ATTEMPT + f"import signal; print(json.dumps(attempt(os.kill, "
                    f"{sleeper.pid}, signal.SIGKILL)))")
        assert seen(r) == "ProcessLookupError"
        time.sleep(0.1)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_host_network_is_unreachable(box: Box) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        r = box.run(ATTEMPT + "import socket; print(json.dumps(attempt(socket.create_connection"
                    f", ('127.0.0.1', {port}), 2)))")
        assert seen(r) == "ConnectionRefusedError"
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.mark.root
@pytest.mark.parametrize("live", [False, True], ids=["plain", "live"])
def test_no_process_holds_a_host_capability(box: Box, live: bool) -> None:
    """Seen from the host while the script waits: every process of the sandbox (bwrap, its
    init, the script) runs as SANDBOX_UID (real, effective, saved) with no_new_privs, and has
    no capability in the host's user namespace (none at all, or only in a user namespace of
    its own). The grader's reaper, this process's child, runs no untrusted code."""
    if live and contain.available(live=True):
        pytest.skip(f"live sandbox unavailable: {contain.available(live=True)}")
    marker, ready, stop = uuid.uuid4().hex, box.results / "ready", box.results / "stop"
    code = (f"import os, time  # {marker}\nopen('{ready}', 'w').close()\n"
            f"end = time.monotonic() + 15\n"
            f"while not os.path.exists('{stop}') and time.monotonic() < end:\n"
            "    time.sleep(0.02)\n")
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(box.run, code, live=live)
        try:
            _wait_for(ready, 10)
            seen_now = [_status(pid) for pid in _marked(marker)]
        finally:
            stop.touch()
        assert future.result().returncode == 0
    mine = os.readlink("/proc/self/ns/user")
    inside = [st for st in seen_now if st["PPid"] != [str(os.getpid())]]
    assert len(inside) == 3, seen_now  # bwrap, bwrap's init (PID 1 inside), the script
    for st in inside:
        assert st["Uid"] == st["Gid"] == [str(contain.SANDBOX_UID)] * 4, st
        assert st["Groups"] == [] and st["NoNewPrivs"] == ["1"], st
        assert st["userns"] != mine or int(st["CapEff"][0], 16) == 0, st
    assert any(st["userns"] == mine for st in inside)  # bwrap itself, without capabilities
    assert any(st["userns"] != mine for st in inside)


@pytest.mark.root
def test_a_fork_bomb_ends_at_the_wall_time_and_the_host_still_forks(box: Box) -> None:
    """RLIMIT_NPROC of the dedicated uid holds the bomb at 64 processes; the wall time ends
    it, and every one of them (they all carry the marker in their command line) is gone."""
    marker = uuid.uuid4().hex
    r = box.run(f"import os  # {marker}\nwhile True:\n    try:\n        os.fork()\n"
                "    except OSError:\n        pass\n", wall_s=3.0, processes=64)
    assert r.timed_out and r.limit == "wall" and r.seconds < 3.0 + 8
    assert subprocess.run(["true"], check=False).returncode == 0
    assert _marked(marker) == []


def test_a_memory_hog_is_stopped_and_reported(box: Box) -> None:
    r = box.run("hog = []\nwhile True:\n    hog.append(bytearray(64 << 20))\n",
                memory_bytes=512 << 20)
    assert r.returncode != 0 and not r.timed_out
    assert r.limit == "memory", r.stderr


def test_cpu_time_and_file_size_limits_are_reported(box: Box) -> None:
    cpu = box.run("while True:\n    pass\n", cpu_s=1)
    assert cpu.limit == "cpu" and not cpu.timed_out, (cpu.returncode, cpu.stderr)
    big = box.run(f"open('{box.results}/big', 'wb').write(bytes(2 << 20))", file_bytes=1 << 20)
    assert big.limit == "file_size" and big.returncode != 0, big.stderr
    assert (box.results / "big").stat().st_size <= 1 << 20


def test_output_is_capped_and_drained(box: Box) -> None:
    """32 MiB through a 64 KiB cap: the command never blocks on a full pipe and ends by
    itself; the kept part is the tail."""
    r = box.run("import sys\nfor i in range(512):\n    sys.stdout.write(f'{i:08d}' * 8192)\n"
                "sys.stderr.write('e' * (1 << 20) + 'END')\n")
    assert r.returncode == 0 and not r.timed_out
    assert r.output_truncated
    assert len(r.stdout) == FAST.output_bytes and r.stdout.endswith("00000511")
    assert len(r.stderr) == FAST.output_bytes and r.stderr.endswith("END")


def test_endless_output_is_cut_at_the_wall_time(box: Box) -> None:
    r = box.run("import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n", wall_s=1.5)
    assert r.timed_out and r.output_truncated and len(r.stdout) <= FAST.output_bytes
    assert r.seconds < 1.5 + 8


def test_a_sleep_past_the_wall_time_is_killed_with_everything_it_started(box: Box) -> None:
    marker = f"{time.time_ns() % 10**9}.5"  # `sleep 123456789.5`: unique on this host
    r = box.run("import subprocess, time\n"
                f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
                f"subprocess.Popen(['sleep', '{marker}'])\ntime.sleep(600)\n", wall_s=1.5)
    assert r.timed_out and r.limit == "wall" and r.seconds < 1.5 + 8
    assert [p for p in _all_pids() if _cmdline(p) == ["sleep", marker]] == []
    assert _marked(marker) == []  # nor the script, its shell or bwrap


def test_live_mode_owns_its_network_namespace(box: Box) -> None:
    if contain.available(live=True):
        pytest.skip(f"live sandbox unavailable: {contain.available(live=True)}")
    name = f"sbx{os.getpid() % 100000}"
    assert not Path(f"/sys/class/net/{name}").exists()
    r = box.run(ATTEMPT + "import subprocess as sp\n"
                f"cmds = [['ip', 'link', 'add', 'name', '{name}', 'type', 'veth', 'peer', "
                f"'name', '{name}p'], ['tc', 'qdisc', 'add', 'dev', '{name}', 'root', 'tbf', "
                "'rate', '1mbit', 'burst', '32kbit', 'latency', '400ms'], "
                f"['tc', 'qdisc', 'show', 'dev', '{name}']]\n"
                "out = [sp.run(c, capture_output=True, text=True) for c in cmds]\n"
                "print(json.dumps([[p.returncode, p.stdout + p.stderr] for p in out] + "
                "[open('/proc/self/uid_map').read().split()]))\n", live=True)
    *cmds, uid_map = seen(r)
    assert [rc for rc, _ in cmds] == [0, 0, 0], cmds
    assert "tbf" in cmds[2][1]
    outer = str(contain.SANDBOX_UID if os.geteuid() == 0 else os.geteuid())
    assert uid_map == ["0", outer, "1"]  # root inside maps to the unprivileged uid outside
    assert not Path(f"/sys/class/net/{name}").exists()


def test_available_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contain, "BWRAP", "/nonexistent/bwrap")
    contain.available.cache_clear()
    try:
        assert "bwrap" in contain.available()
    finally:
        monkeypatch.undo()
        contain.available.cache_clear()


def test_unreachable_folders_are_refused(box: Box) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root caller drops to another uid")
    box.root.chmod(0o700)
    with pytest.raises(contain.SandboxError, match="chmod o\\+x"):
        box.run("pass")


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _wait_for(path: Path, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} did not appear"
        time.sleep(0.02)


def _status(pid: int) -> dict[str, list[str]]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()
    fields["userns"] = os.readlink(f"/proc/{pid}/ns/user")
    return fields


def _marked(marker: str) -> list[int]:
    """PIDs whose command line holds `marker` (this test's unique script text)."""
    return [pid for pid in _all_pids() if pid != os.getpid()
            and any(marker in arg for arg in _cmdline(pid))]
