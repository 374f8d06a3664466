"""What a running fabric owns, written down so that a killed run can be cleaned up by the next.

The fabric lock (LOCK_NAME) and the manifest (MANIFEST_NAME) live in the run's private
directory (safety.privdir: /run/mrc-testbed, root-only, checked before every use), never
at a fixed name in a world-writable directory: a file another user planted there would
otherwise tell root which processes to kill and which interfaces and directories to remove.
The run holding the fabric lock records, in the manifest, its PIDs (each with its start time from
/proc, so a recycled PID is never touched), the root-namespace interface names it creates and
its work directory. A clean stop removes the manifest. The next start takes the lock first;
holding it proves the recorded owner is gone (flock dies with its holder), so whatever the
manifest still lists is a leftover of ours and is removed at once, by PID and by name.

`deferred_signals` keeps Ctrl-C and SIGTERM from cutting a teardown in half: they are held
until the teardown is done, and a second one escalates to SIGKILL of the recorded PIDs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from fabric.topology import Fabric
from safety import shield
from safety.errors import SafetyError
from safety.privdir import PrivateDir, UnsafePathError, default_run_dir

LOCK_NAME = "fabric.lock"
MANIFEST_NAME = "run.json"
KILL_WAIT_S = 5.0
MAX_MANIFEST_BYTES = 4 << 20


class RunStateError(SafetyError, RuntimeError):
    """Another fabric holds the machine; emulation.network.NetworkError derives from it."""


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (after "comm)"), or None if there is no such PID."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot), or None if there is no such PID."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def same_process(pid: int, started: int) -> bool:
    """The recorded process still runs (a zombie has ended: only its parent's wait is due)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z" and int(fields[19]) == started


class RunManifest:
    """The manifest of the run in this process; every change is written at once, atomically."""

    def __init__(self, workdir: Path, own_workdir: bool, rundir: PrivateDir) -> None:
        self.rundir = rundir
        self.path = rundir.path / MANIFEST_NAME
        self.data: dict[str, Any] = {
            "owner": [os.getpid(), start_time(os.getpid())], "workdir": str(workdir),
            "own_workdir": own_workdir, "pids": [], "interfaces": [], "nft_tables": []}
        self.save()

    def add_pid(self, pid: int | None) -> None:
        started = start_time(pid) if pid else None
        if started is not None and [pid, started] not in self.data["pids"]:
            self.data["pids"].append([pid, started])
            self.save()

    def add_interfaces(self, names: list[str]) -> None:
        new = [n for n in names if n not in self.data["interfaces"]]
        if new:
            self.data["interfaces"].extend(new)
            self.save()

    def add_nft_table(self, name: str) -> None:
        self.data["nft_tables"].append(name)
        self.save()

    def live_pids(self) -> list[int]:
        return [pid for pid, started in self.data["pids"] if same_process(pid, started)]

    def sweep(self) -> dict[str, int]:
        """Remove what is still there of this run: SIGKILL its live PIDs, delete its
        interfaces. Returns how many of each it found."""
        return remove_recorded(self.data["pids"], self.data["interfaces"],
                               self.data["nft_tables"])

    def save(self) -> None:
        self.rundir.write_bytes(MANIFEST_NAME, json.dumps(self.data).encode())

    def remove(self) -> None:
        self.rundir.unlink(MANIFEST_NAME)


def kill_all(pids: list[int], started: dict[int, int] | None = None) -> None:
    """SIGKILL each PID (still the recorded process, if `started` says when it started)."""
    for pid in pids:
        if started is not None and not same_process(pid, started[pid]):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def remove_recorded(pids: list[list[int]], interfaces: list[str],
                    nft_tables: Sequence[str] = ()) -> dict[str, int]:
    """SIGKILL the recorded processes still running (by PID and start time) and wait for
    them, then delete the recorded interfaces that exist and the run's nftables tables
    (safety.shield.remove knows each guard's and cable cut's family); returns how many
    processes and interfaces."""
    started = {pid: s for pid, s in pids}
    alive = [pid for pid in started if same_process(pid, started[pid])]
    kill_all(alive, started)
    deadline = time.monotonic() + KILL_WAIT_S
    while any(same_process(p, started[p]) for p in alive) and time.monotonic() < deadline:
        time.sleep(0.05)
    removed = 0
    for name in interfaces:
        if Path(f"/sys/class/net/{name}").exists():
            subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)
            removed += 1
    for table in nft_tables:  # the guards (shield.GUARD_FAMILIES), cable cuts on a cluster
        shield.remove(table)
    return {"processes": len(alive), "interfaces": removed}


def _read_manifest(rundir: PrivateDir) -> dict[str, Any]:
    data = json.loads(rundir.read_bytes(MANIFEST_NAME, MAX_MANIFEST_BYTES))
    owner, owner_started = data["owner"]
    pids = [[int(p), int(s)] for p, s in data["pids"]]
    names = [str(n) for n in data["interfaces"]]
    tables = [str(n) for n in data.get("nft_tables", [])]
    return {"owner": [int(owner), int(owner_started)], "pids": pids, "interfaces": names,
            "nft_tables": tables,
            "workdir": str(data["workdir"]), "own_workdir": data["own_workdir"] is True}


def make_workdir(owner: object) -> Path:
    """A fresh work directory for `owner`'s run (mkdtemp: 0700, created exclusively). The
    owner's stop() removes it; as a safety net it also goes when the owner is collected or
    the process exits, whatever path left it behind (CI kept finding one empty directory a
    run, its maker unknown)."""
    path = Path(tempfile.mkdtemp(prefix="mrc-net-"))
    weakref.finalize(owner, shutil.rmtree, path, True)  # True: ignore_errors (gone already)
    return path


def remove_workdir(workdir: Path) -> bool:
    """Remove a run's own work directory: only a real directory of ours (never a link)."""
    try:
        st = os.lstat(workdir)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UnsafePathError(f"refusing to remove {workdir}: not a directory of uid "
                              f"{os.geteuid()}")
    shutil.rmtree(workdir)  # fd-based on Linux: links inside are removed, not followed
    return True


def clean_leftovers(log: Callable[[str], None], rundir: PrivateDir) -> dict[str, int] | None:
    """Remove what a dead run recorded; call only while holding the fabric lock."""
    path = rundir.path / MANIFEST_NAME
    try:
        data = _read_manifest(rundir)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log(f"ignoring unreadable run manifest {path}: {exc}")
        rundir.unlink(MANIFEST_NAME)
        return None
    owner, owner_started = data["owner"]
    if owner != os.getpid() and same_process(owner, owner_started):
        log(f"run manifest {path}: its owner PID {owner} still runs; leaving it alone")
        return None
    found = remove_recorded(data["pids"], data["interfaces"], data["nft_tables"])
    removed_dir = data["own_workdir"] and remove_workdir(Path(data["workdir"]))
    rundir.unlink(MANIFEST_NAME)
    log(f"cleaned up after a run that was killed: {found['processes']} processes, "
        f"{found['interfaces']} interfaces" + (", its work directory" if removed_dir else ""))
    return found


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def terminate_as_interrupt() -> None:
    """Make SIGTERM unwind like Ctrl-C, so `with` blocks and `finally` clauses stop the
    fabric; Python's default for SIGTERM exits at once and leaves switches and veths behind."""
    signal.signal(signal.SIGTERM, _interrupt)


@contextlib.contextmanager
def deferred_signals(on_repeat: Callable[[], None]) -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, then raise KeyboardInterrupt if one came; a
    second one during the block calls `on_repeat` (escalation). Outside the main thread
    (signals cannot be handled there) the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        if len(received) == 2:
            on_repeat()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if received:
        raise KeyboardInterrupt


def acquire_fabric_lock(timeout: float, log=print, rundir: PrivateDir | None = None) -> int:
    """Block until no other fabric runs on this machine; close the returned fd to release.
    The lock file is in the run's private directory (`rundir`, default privdir's), so no
    other user can hold it or plant it. The holder writes its PID, start time and command
    into it, so whoever waits is told what it waits for."""
    own = rundir is None
    rundir = PrivateDir() if rundir is None else rundir
    try:
        fd = rundir.open(LOCK_NAME, os.O_RDWR, create=True)
    finally:
        if own:
            rundir.close()
    path = rundir.path / LOCK_NAME
    deadline = time.monotonic() + timeout
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() > deadline:
                holder = _holder_text(fd)
                os.close(fd)
                raise RunStateError(f"another fabric still runs on this machine after "
                                    f"{timeout:.0f} s: {holder} (lock {path})") from None
            if not waited:
                log(f"waiting for another fabric on this machine to stop: {_holder_text(fd)}")
                waited = True
            time.sleep(0.5)
            continue
        os.ftruncate(fd, 0)
        started = time.strftime("%H:%M:%S UTC", time.gmtime())
        command = " ".join(Path(f"/proc/{os.getpid()}/cmdline").read_bytes()
                           .decode(errors="replace").split("\0")).strip()
        os.pwrite(fd, f"{os.getpid()}\t{started}\t{command}\n".encode(), 0)
        return fd


def _holder_text(fd: int) -> str:
    try:
        pid, started, command = os.pread(fd, 4096, 0).decode(errors="replace") \
            .rstrip("\n").split("\t", 2)
    except (OSError, ValueError):
        return "holder unknown"
    if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
        return "holder unknown (it did not record itself)"
    return f"PID {pid} ({command[:120]}), holding it since {started}"


def lock_holder(rundir: PrivateDir) -> str:
    """Who holds the fabric lock, as its holder recorded it ("holder unknown" if it did not)."""
    try:
        fd = rundir.open(LOCK_NAME, os.O_RDONLY)
    except (OSError, UnsafePathError):
        return "holder unknown"
    try:
        return _holder_text(fd)
    finally:
        os.close(fd)


def wait_interfaces_gone(fabric: Fabric, deadline: float, log=print) -> None:
    """Wait until no switch interface of `fabric` exists in this namespace (a Mininet network
    built without the fabric lock is still running, or a killed run left its veths)."""
    waited = False
    while (busy := existing_interface(fabric)) is not None:
        if time.monotonic() > deadline:
            raise RunStateError(f"interface {busy} still exists: another Mininet network runs "
                               "without the fabric lock, or a killed run left it behind "
                               f"(if so, remove it with `ip link del {busy}`)")
        if not waited:
            log(f"waiting for interface {busy} (another network) to go away")
            waited = True
        time.sleep(0.5)


def fabric_interfaces(fabric: Fabric) -> list[str]:
    """The root-namespace interfaces a fabric creates: its switches' ports."""
    return [f"{node}-eth{port}" for lk in fabric.links
            for node, port in ((lk.a, lk.a_port), (lk.b, lk.b_port)) if node in fabric.by_name]


def existing_interface(fabric: Fabric) -> str | None:
    """The first interface of `fabric`'s switches that exists in this namespace, if any."""
    return next((n for n in fabric_interfaces(fabric) if Path(f"/sys/class/net/{n}").exists()),
                None)


def manifest_path() -> Path:
    """Where the running fabric's manifest is (for tests and the soak run, which read it)."""
    return default_run_dir() / MANIFEST_NAME
