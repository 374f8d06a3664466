"""--json FILE and the other files a user names for output, written as root (issue 54, hole 5):
an unprivileged user (nobody) plants the name in a sticky world-writable directory, as /tmp
is, as a symbolic link to a root-only file, a 0666 file of its own, a FIFO or a hard link;
write_json (fabric.outfile.open_output_file) refuses each and leaves it as it was, and an
entry point says why on stderr and exits non-zero before it runs anything. Our own file is
overwritten, a new one made 0644."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fabric.options import write_json
from fabric.outfile import UnsafeOutputError
from tests.support import as_nobody

REPO = Path(__file__).resolve().parents[3]
DATA = {"grades": {"alice": 10, "bob": 7}}
SECRET = "root's own, 0600\n"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plays an unprivileged user: root")


class Hung(Exception):
    """The write blocked (a FIFO with nobody reading) instead of being refused."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise Hung in the main thread if the block outlasts `seconds`, so that old code that
    blocks on a FIFO fails the test instead of hanging the suite."""
    def expire(_signum: int, _frame: object) -> None:
        raise Hung(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def victim() -> Iterator[Path]:
    """A root-only file in a root-only directory: what a planted name points root at."""
    folder = Path(tempfile.mkdtemp(prefix="mrc-test-victim-"))
    path = folder / "victim"
    path.write_text(SECRET)
    path.chmod(0o600)
    try:
        yield path
    finally:
        shutil.rmtree(folder)


def intact(victim: Path) -> bool:
    st = victim.stat()
    return (victim.read_text(), st.st_uid, st.st_mode & 0o7777) == (SECRET, 0, 0o600)


def test_a_planted_link_to_a_root_file_is_refused(shared_tmp: Path, victim: Path) -> None:
    """The confirmed attack: /tmp/grades.json -> /root/victim made root overwrite it."""
    link = shared_tmp / "grades.json"
    assert as_nobody(f"ln -s {victim} {link}").returncode == 0
    with pytest.raises(UnsafeOutputError, match="symbolic link"):
        write_json(str(link), DATA)
    assert intact(victim) and link.is_symlink()


def test_a_file_another_user_made_writable_is_refused(shared_tmp: Path) -> None:
    """A 0666 file nobody made: written, its owner could read and edit every grade."""
    planted = shared_tmp / "grades.json"
    assert as_nobody(f"umask 0; echo planted > {planted}; chmod 666 {planted}").returncode == 0
    with pytest.raises(UnsafeOutputError, match=r"belongs to uid 65534.*Choose another path"):
        write_json(str(planted), DATA)
    assert planted.read_text() == "planted\n" and planted.stat().st_mode & 0o777 == 0o666


@pytest.mark.parametrize("reader", [False, True], ids=["nobody-reading", "someone-reading"])
def test_a_fifo_is_refused_without_hanging(shared_tmp: Path, reader: bool) -> None:
    """With nobody reading, a plain open blocks for ever; with a reader, whatever is
    written goes to whoever holds the other end. Neither may happen."""
    fifo = shared_tmp / "grades.json"
    assert as_nobody(f"mkfifo -m 666 {fifo}").returncode == 0
    end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if reader else None
    try:
        with deadline(5.0), pytest.raises(UnsafeOutputError, match="FIFO"):
            write_json(str(fifo), DATA)
        if end is not None:
            assert os.read(end, 1 << 16) == b""
    finally:
        if end is not None:
            os.close(end)


def test_a_hard_link_to_a_root_file_is_refused(shared_tmp: Path, victim: Path) -> None:
    """Another name of a file of ours: truncating it would truncate the victim."""
    link = shared_tmp / "grades.json"
    os.link(victim, link)  # root can; nobody could where protected_hardlinks is off
    with pytest.raises(UnsafeOutputError, match="2 hard links"):
        write_json(str(link), DATA)
    assert intact(victim)


def test_our_own_file_is_overwritten_and_closed_to_other_writers(shared_tmp: Path) -> None:
    ours = shared_tmp / "grades.json"
    ours.write_text("x" * 10_000)  # longer than the JSON: what is left must be cut off
    ours.chmod(0o666)
    inode = ours.stat().st_ino
    write_json(str(ours), DATA)
    st = ours.stat()
    assert json.loads(ours.read_text()) == DATA
    assert (st.st_ino, st.st_uid, st.st_mode & 0o7777) == (inode, 0, 0o644)


def test_a_new_file_is_made_0644_even_under_umask_0(shared_tmp: Path) -> None:
    new = shared_tmp / "grades.json"
    old_umask = os.umask(0)
    try:
        write_json(str(new), DATA)
    finally:
        os.umask(old_umask)
    st = new.stat()
    assert json.loads(new.read_text()) == DATA
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o644)


def test_an_entry_point_refuses_a_planted_link_before_it_runs(shared_tmp: Path,
                                                              victim: Path) -> None:
    """The simulator as root, --json at nobody's link: exit 2, the reason on stderr."""
    link = shared_tmp / "sim.json"
    assert as_nobody(f"ln -s {victim} {link}").returncode == 0
    done = subprocess.run([sys.executable, "-m", "sim", "clean", "--fabric", "paths-32",
                           "--size", "200000", "--json", str(link)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"refusing to write {link}: it is a symbolic link" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and intact(victim) and link.is_symlink()


@pytest.mark.parametrize("command", [
    ["bench.simulated.sim_bench", "permutation", "--size", "20000", "--contenders", "mrc", "--out"],
    ["bench.simulated.sim_scale", "--quick", "--parts", "bypass", "--plot"],
    ["grader", "solution", "1"],
], ids=["sim_bench --out", "sim_scale --plot", "grader solution"])
def test_output_directories_of_another_user_are_refused(shared_tmp: Path,
                                                        command: list[str]) -> None:
    """Directories a command writes its files into, named by the user: one nobody made (and
    anyone may write) is refused before anything runs, and nothing is written there."""
    folder = shared_tmp / "out"
    assert as_nobody(f"mkdir -m 777 {folder}").returncode == 0
    done = subprocess.run([sys.executable, "-m", *command, str(folder)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and str(folder) in done.stderr, done.stderr
    assert list(folder.iterdir()) == []


def test_an_agents_log_file_is_opened_by_the_same_rule(shared_tmp: Path, victim: Path) -> None:
    """An agent run by hand as root with --log at nobody's link: exit 2 before it starts,
    the reason on stderr, the victim intact; our own log is appended to."""
    link = shared_tmp / "agent.log"
    assert as_nobody(f"ln -s {victim} {link}").returncode == 0
    done = subprocess.run([sys.executable, "-m", "host_agent.agent", "--log", str(link),
                           "--host", "0", "--socket", str(shared_tmp / "never.sock")],
                          cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "it is a symbolic link" in done.stderr, done.stderr
    assert intact(victim) and link.is_symlink()
    ours = shared_tmp / "ours.log"
    ours.write_text("earlier\n")
    from fabric.outfile import open_log_file
    with open_log_file(ours) as f:
        f.write("later\n")
    assert ours.read_text() == "earlier\nlater\n"
