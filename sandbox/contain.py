"""One grading command, contained: bubblewrap namespaces, an unprivileged uid and rlimits.

    result = contain.run([python, "-m", "grader.inner", "3", "--target", "soft", "--out", OUT],
                         copy=copy, results=results, venv=venv, env={"PYTHONPATH": str(copy)},
                         limits=contain.Limits(), live=False)

The grading of a submission imports the student's code, so the command it runs is treated as
hostile. The chain is `reaper (_REAPER) -> prlimit (rlimits) -> setpriv (uid drop,
no_new_privs) -> bwrap -> [live: _LIVE_PRELUDE] -> argv`:
- Identity. A root caller drops to SANDBOX_UID before bwrap, so nothing in the sandbox holds a
  capability in the initial user namespace. The uid is dedicated (no passwd entry, no files)
  rather than nobody's 65534, because RLIMIT_NPROC counts every process of a real uid: a
  shared uid would let other daemons eat the budget (and the fork bomb would eat theirs).
  Hence also one uid per concurrent grading job (use_slot).
- Namespaces: user, network (only a loopback), mount, PID, IPC, UTS, cgroup; nested user
  namespaces are disabled unless live (--disable-userns would leave a live command in a child
  user namespace without power over its network namespace). `live=True` maps uid 0 inside
  with every capability, of the sandbox's own user namespace only: enough for veths, network
  namespaces, qdiscs and nftables in its own network namespace (Mininet, the testbed's
  fabric), nothing outside.
  That root can remount its binds read-write, so what keeps /usr, /etc, /opt, the venv and
  the copy intact in live mode is their host ownership (host root is unmapped inside), hence
  nothing in the copy may be o+w (run() clears it). Live mode binds the host's /sys read-only
  under a sysfs of its own (a new sysfs is allowed only where one is visible): host interface
  names and counters are readable to a live command that unmounts its own.
- File system: /usr, /etc, /opt and the venv read-only (the venv at its real path: its
  bin/python and pyvenv.cfg name it); private tmpfs at /tmp (HOME and the P4 compile cache
  live there) and /run; nothing else of the host (not /home, /root, /var, /work, the host's
  /tmp or /run, the rest of the checkout). The copy is bound read-only at its own path, so
  the command can neither fill the host's disk through it nor change what a later stage
  imports; its SCRATCH folders (the P4 stage's outputs) get private tmpfs.
  `results` is the only writable host path; read it back with read_result (no symlinks).
- Limits (Limits): wall time (the PID namespace's init is SIGKILLed, which takes every
  process in it down; the host then waits for that init to be gone), RLIMIT_AS, RLIMIT_NPROC,
  RLIMIT_FSIZE, RLIMIT_CPU (per process), no core files, sized tmpfs (/tmp, scratch, /run,
  /dev/shm; /dev read-only), and the output kept from each pipe (drained to the end, so the
  command never blocks on a full pipe). Not bounded: the sum of memory over processes (each
  may map RLIMIT_AS) and, in live mode, tmpfs the command mounts itself: that needs a cgroup.

Folders above the copy and `results` must be searchable by the sandbox uid (_check_reachable).
PR_SET_PDEATHSIG (--die-with-parent) fires when the *thread* that started bwrap ends: call
run() from a thread that outlives it. sandbox.pipe serves launch()'s commands.
"""

from __future__ import annotations

import functools
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.errors import SandboxError
from sandbox.supervise import SandboxResult, supervise

BWRAP, SETPRIV, PRLIMIT = "/usr/bin/bwrap", "/usr/bin/setpriv", "/usr/bin/prlimit"
SANDBOX_UID = SANDBOX_GID = BASE_UID = 64_321  # dedicated: see the module docstring
MAX_SLOTS = 64  # grading jobs at once (grader.batch): slot k's uid is BASE_UID + k
SCRATCH = ("p4src/build",)  # folders of the copy the command may write into (tmpfs)
HOME = "/tmp/home"  # inside the sandbox, on its private /tmp tmpfs: never the host's /tmp
DEFAULT_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": HOME, "XDG_CACHE_HOME": f"{HOME}/.cache", "TMPDIR": "/tmp",
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
_CHAIN_ENV = {"PATH": DEFAULT_ENV["PATH"], "LANG": "C.UTF-8"}  # of the helpers that run as root
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_RUN_BYTES = 64 << 20
# Run before a live command, as root of the sandbox's user namespace: a sysfs of the sandbox's
# network namespace over the host's (the testbed reads /sys/class/net/IF/statistics of the
# switches' ports). /proc/sys needs nothing: an unprivileged bwrap leaves it writable, and only
# the network namespace's own sysctls (net.ipv6.conf.IF.*) are writable by this root; the
# kernel's global ones stay owned by the host's root, which is unmapped here.
_LIVE_PRELUDE = 'mount -t sysfs -o nosuid,nodev,noexec sysfs /sys && exec "$@"'
# The chain's first process, run by this Python with -I -S: it dies with the thread that
# started it (as --die-with-parent would), reaps what bwrap orphans and exits with bwrap's
# status. bwrap exits as soon as its PID-namespace init reports the command's status, before
# that init is reaped (and before the kernel has emptied the namespace): without a reaper the
# init is left a zombie for the host's PID 1, and the namespace may not be empty yet.
_REAPER = """import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
if os.getppid() != int(sys.argv[1]):
    sys.exit(125)
child = os.fork()
if child == 0:
    os.execv(sys.argv[2], sys.argv[2:])
status = 0
while True:
    try:
        pid, st = os.wait()
    except ChildProcessError:
        break
    if pid == child:
        status = os.waitstatus_to_exitcode(st)
sys.exit(status if status >= 0 else 128 - status)
"""


@dataclass(frozen=True)
class Limits:
    """Defaults fit one submission's checks (grader.workspace.CHECKS_TIMEOUT_S = 900 s). The
    live stage (8-switch fabric, 256 KiB transfer) measured here: <= 25 processes, 250 threads
    (BMv2; 150 soft), 1.5 GiB largest address space (p4c within 1 GiB), 0.6 GB resident."""
    wall_s: float = 900.0
    memory_bytes: int = 4 << 30  # RLIMIT_AS, per process
    processes: int = 1024  # RLIMIT_NPROC: processes and threads of SANDBOX_UID
    file_bytes: int = 256 << 20  # RLIMIT_FSIZE: the largest file one may write
    output_bytes: int = 256 << 10  # kept from each of stdout and stderr (the tail)
    cpu_s: int = 900  # RLIMIT_CPU, per process: SIGXCPU, then SIGKILL 5 s later
    tmp_bytes: int = 1 << 30  # size of the private /tmp (RAM): also HOME and caches


DEFAULT_LIMITS = Limits()


def use_slot(slot: int) -> None:
    """This process's sandboxes run as uid BASE_UID + `slot` (see Identity above)."""
    global SANDBOX_UID, SANDBOX_GID
    if not 0 <= slot < MAX_SLOTS:
        raise SandboxError(f"slot {slot} is outside 0..{MAX_SLOTS - 1}")
    SANDBOX_UID = SANDBOX_GID = BASE_UID + slot


def _uid_switch() -> list[str]:
    """setpriv to SANDBOX_UID when the caller is root; an unprivileged caller is already one."""
    return [] if os.geteuid() != 0 else [
        SETPRIV, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups",
        "--no-new-privs", "--inh-caps=-all"]


def _rlimits(limits: Limits) -> list[str]:
    return [PRLIMIT, f"--as={limits.memory_bytes}", f"--nproc={limits.processes}",
            f"--fsize={limits.file_bytes}", f"--cpu={limits.cpu_s}:{limits.cpu_s + 5}",
            "--core=0", "--"]


def _base_bwrap(live: bool, limits: Limits, info_fd: int) -> list[str]:
    """bwrap's namespaces and the system part of the file system (no host data)."""
    args = [BWRAP, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--hostname", "mrc-sandbox", "--info-fd", str(info_fd), "--ro-bind", "/usr", "/usr"]
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--ro-bind", "/etc", "/etc"]
    if os.path.isdir("/opt"):
        args += ["--ro-bind", "/opt", "/opt"]
    args += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",  # RAM: only sized tmpfs
             "--perms", "1777", "--size", str(_RUN_BYTES), "--tmpfs", "/dev/shm",
             "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
             "--perms", "0755", "--size", str(_RUN_BYTES), "--tmpfs", "/run",
             "--perms", "0700", "--dir", HOME]
    if live:  # nested user namespaces stay allowed (module docstring). The host's /sys,
        # read-only, only so that the kernel lets _LIVE_PRELUDE and Mininet's `mnexec -n`
        # mount a sysfs of their own network namespace over it (mnexec hangs Mininet without).
        args += ["--uid", "0", "--gid", "0", "--cap-add", "ALL", "--ro-bind", "/sys", "/sys"]
    else:
        args += ["--disable-userns"]
    return args


def _chain(limits: Limits, live: bool, info_fd: int, mounts: list[str],
           argv: Sequence[str]) -> list[str]:
    """reaper -> prlimit -> setpriv (when root) -> bwrap -> argv."""
    prelude = ["/bin/sh", "-c", _LIVE_PRELUDE, "sh"] if live else []
    return [sys.executable, "-I", "-S", "-c", _REAPER, str(os.getpid()), *_rlimits(limits),
            *_uid_switch(), *_base_bwrap(live, limits, info_fd), *mounts, "--", *prelude, *argv]


@functools.lru_cache(maxsize=2)
def available(live: bool = False) -> str:
    """'' when run() works here (probed by running `true` the way run() would), else why."""
    for tool in (BWRAP, PRLIMIT, *([SETPRIV] if os.geteuid() == 0 else [])):
        if not os.access(tool, os.X_OK):
            return f"{tool} is missing: apt-get install bubblewrap util-linux"
    hint = _userns_hint()
    read, write = os.pipe()
    try:
        cmd = _chain(DEFAULT_LIMITS, live, write, [], ["/usr/bin/true"])
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              pass_fds=(write,), env=_CHAIN_ENV, timeout=30,
                              cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap probe failed: {exc}"
    finally:
        os.close(read)
        os.close(write)
    if proc.returncode != 0:
        return f"bwrap cannot create its namespaces here: {proc.stderr.strip()[-300:]}" + hint
    return ""


def _userns_hint() -> str:
    """The sysctls that commonly forbid unprivileged user namespaces, when set so."""
    checks = (("/proc/sys/user/max_user_namespaces", "0"),
              ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
              ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"))
    hints = []
    for path, bad in checks:
        try:
            if Path(path).read_text().strip() == bad:
                hints.append(f"{path.removeprefix('/proc/sys/').replace('/', '.')}={bad}")
        except OSError:
            continue  # this kernel has no such knob
    return f" (sysctl {', '.join(hints)})" if hints else ""


def _prepare(copy: Path, results: Path, scratch: Sequence[str]) -> list[Path]:
    """Make the copy readable and `results` writable for the sandbox uid; create the scratch
    mount points (the copy is read-only inside). Returns the scratch folders."""
    for base, dirs, files in os.walk(copy):
        for name in [*dirs, *files]:
            st = os.lstat(os.path.join(base, name))
            if stat.S_ISLNK(st.st_mode):
                continue
            want = (st.st_mode | stat.S_IROTH) & ~stat.S_IWOTH  # see the module docstring
            if stat.S_ISDIR(st.st_mode) or st.st_mode & stat.S_IXUSR:
                want |= stat.S_IXOTH
            if want != st.st_mode:
                os.chmod(os.path.join(base, name), stat.S_IMODE(want))
    os.chmod(copy, stat.S_IMODE(os.stat(copy).st_mode) & ~0o002 | 0o005)
    folders = []
    for rel in scratch:
        folder = copy / rel
        if folder.parent.is_dir() and not folder.parent.is_symlink():
            folder.mkdir(exist_ok=True)
            folders.append(folder)
    if os.geteuid() == 0:
        os.chown(results, SANDBOX_UID, SANDBOX_GID)
    os.chmod(results, 0o700)
    return folders


def _check_reachable(path: Path) -> None:
    """bwrap resolves bind sources as the sandbox uid, so every folder above `path` must let
    it search (o+x, or g+x with group SANDBOX_GID; listing is not needed): a mkdtemp folder is
    0700, make it 0711, or 0710 with group SANDBOX_GID to keep other users out."""
    if os.geteuid() != 0:
        return
    for parent in path.parents:
        st = os.stat(parent)
        if not (st.st_mode & stat.S_IXOTH
                or (st.st_gid == SANDBOX_GID and st.st_mode & stat.S_IXGRP)):
            raise SandboxError(f"the sandbox uid cannot reach {path}: {parent} is not "
                               f"searchable by it (chmod o+x {parent}, e.g. mode 0711, or "
                               f"group {SANDBOX_GID} with mode 0710)")


def run(argv: Sequence[str], *, copy: Path, results: Path, venv: Path, env: dict[str, str],
        limits: Limits = DEFAULT_LIMITS, live: bool = False,
        scratch: Sequence[str] = SCRATCH) -> SandboxResult:
    """Run argv in the sandbox, in `copy` (its cwd); wait for it (at most limits.wall_s). Its
    environment is DEFAULT_ENV and `env`, given to bwrap as --setenv arguments: the root
    helpers never see it (LD_PRELOAD), and ps shows it (no place for a secret)."""
    proc, info_r, start = launch(argv, copy=copy, results=results, venv=venv, env=env,
                                 limits=limits, live=live, scratch=scratch,
                                 stdio=(subprocess.DEVNULL, subprocess.PIPE, subprocess.PIPE))
    try:
        return supervise(proc, info_r, start, wall_s=limits.wall_s,
                         output_bytes=limits.output_bytes)
    finally:
        os.close(info_r)
        if proc.poll() is None:  # only on an error in supervise itself: leave nothing behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def launch(argv: Sequence[str], *, copy: Path, results: Path, venv: Path, env: dict[str, str],
           limits: Limits, live: bool, scratch: Sequence[str],
           stdio: tuple[Any, Any, Any]) -> tuple[subprocess.Popen, int, float]:
    """Start argv as run() describes, with `stdio` as its stdin, stdout and stderr: the
    process, the read end of bwrap's --info-fd (for init_of) and the start time. The caller
    ends the sandbox and closes the fd (run(); sandbox.pipe for a served command)."""
    copy, results, venv = (Path(os.path.realpath(p)) for p in (copy, results, venv))
    for path in (copy, results, venv):
        if not path.is_dir():
            raise SandboxError(f"{path} is not a directory")
        _check_reachable(path)
    folders = _prepare(copy, results, scratch)
    mounts = ["--ro-bind", str(venv), str(venv), "--ro-bind", str(copy), str(copy)]
    for folder in folders:
        mounts += ["--size", str(limits.tmp_bytes), "--tmpfs", str(folder)]
    mounts += ["--bind", str(results), str(results), "--chdir", str(copy), "--clearenv"]
    for key, value in {**DEFAULT_ENV, **env}.items():
        mounts += ["--setenv", key, value]
    info_r, info_w = os.pipe()
    try:
        cmd = _chain(limits, live, info_w, mounts, argv)
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2],
                                env=_CHAIN_ENV, pass_fds=(info_w,), start_new_session=True,
                                cwd="/")
    except BaseException:
        os.close(info_r)
        raise
    finally:
        os.close(info_w)
    return proc, info_r, start


def read_result(results: Path, name: str, max_bytes: int) -> bytes:
    """A file the sandbox wrote, read by root: plain name, no symlink, regular, <= max_bytes."""
    if "/" in name or name in ("", ".", ".."):
        raise SandboxError(f"{name!r} is not a plain file name")
    fd = os.open(results / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SandboxError(f"{results / name} is not a regular file")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SandboxError(f"{results / name} is over {max_bytes} bytes")
    return data
