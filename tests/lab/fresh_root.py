"""A fresh Debian 12 (bookworm, minbase) root to run the provisioning script in, as a new
machine would: debootstrap from the Debian mirror this machine's apt uses, then commands run
chrooted in their own mount, PID, IPC and UTS namespaces (not a network namespace: apt and pip
need the network, so the root gets this machine's resolv.conf, local CA certificates and proxy
settings). Everything mounted for a command lives in its private mount namespace and
goes with it; the root's directory is removed on exit, also after a failure or a timeout.

    sudo .venv/bin/python -m tests.lab.fresh_root [--archive DIR] [--keep] -- COMMAND...

runs COMMAND (a shell command line, in the checkout's copy /srv/mrc-testbed) in a fresh root.

MRC_FRESH_ROOT_TARBALL=FILE reuses a tar of a debootstrapped root (saves the ~30 s of
debootstrap): read when FILE exists, written after a debootstrap when it does not.
MRC_FRESH_ROOT_MIRROR=URL picks the mirror instead of this machine's apt sources.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = "bookworm"
GUEST_REPO = "/srv/mrc-testbed"
# Beside the checkout, where install-p4lang.sh looks for the prebuilt archive (../shared/p4lang)
GUEST_ARCHIVE = "/srv/shared/p4lang"
TARBALL_ENV = "MRC_FRESH_ROOT_TARBALL"
MIRROR_ENV = "MRC_FRESH_ROOT_MIRROR"
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
# Passed into the root when set: a proxy the host needs, the root needs too.
PASS_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
COPY_SKIP = {".venv", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", "results", "build"}

# Run by `unshare` inside the new namespaces: $1 is the root, $2 the command line.
ENTER = r"""
set -eu
root=$1
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p "$root/run/lock"
shift
exec chroot "$root" "$@"
"""


def debian_mirror(etc_apt: Path = Path("/etc/apt")) -> str | None:
    """The URI this machine's apt fetches bookworm from (deb822 .sources or one-line .list
    files; apt reads no other names); None for debootstrap's own default."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV]
    files = [etc_apt / "sources.list"]
    if (etc_apt / "sources.list.d").is_dir():
        files += sorted((etc_apt / "sources.list.d").iterdir())
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        if f.name.endswith(".sources"):
            for para in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in para.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if ("deb" in fields.get("types", "").split()
                        and SUITE in fields.get("suites", "").split()
                        and fields.get("enabled", "yes").lower() != "no"
                        and fields.get("uris")):
                    return fields["uris"].split()[0]
        elif f.name == "sources.list" or f.name.endswith(".list"):
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    return None


def checkout_files(repo: Path = REPO) -> list[Path]:
    """The files of the checkout as they are now (tracked and new, not ignored ones), so
    uncommitted changes are what gets provisioned."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
        return [Path(p) for p in sorted(set(out.decode().split("\0"))) if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: copy the tree
        files = []
        for dirpath, dirnames, filenames in os.walk(repo):
            dirnames[:] = [d for d in dirnames if d not in COPY_SKIP]
            files += [Path(dirpath, f).relative_to(repo) for f in filenames]
        return sorted(files)


class FreshRoot:
    """with FreshRoot(log) as root: root.run("scripts/provision.sh ...")"""

    def __init__(self, log: Path, archive: Path | None = None, keep: bool = False) -> None:
        self.log = log
        self.archive = archive
        self.keep = keep
        self.dir: Path | None = None
        self.timings: dict[str, float] = {}

    # -- set-up ------------------------------------------------------------------------
    def __enter__(self) -> FreshRoot:
        self.dir = Path(tempfile.mkdtemp(prefix="mrc-fresh-root-", dir="/var/tmp"))
        self.dir.chmod(0o755)  # a root directory: apt's _apt user must get through it
        try:
            self._bootstrap()
            self._prepare()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _logged(self, argv: list[str], timeout: float) -> None:
        with self.log.open("a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=True,
                           timeout=timeout)

    def _bootstrap(self) -> None:
        assert self.dir is not None
        started = time.monotonic()
        tarball = os.environ.get(TARBALL_ENV)
        if tarball and Path(tarball).is_file():
            self._logged(["tar", "-xpf", tarball, "-C", str(self.dir)], timeout=300)
            self.timings["unpack cached root"] = time.monotonic() - started
            return
        mirror = debian_mirror()
        self._logged(["debootstrap", "--variant=minbase", SUITE, str(self.dir),
                      *([mirror] if mirror else [])], timeout=900)
        self.timings["debootstrap"] = time.monotonic() - started
        if tarball:
            partial = f"{tarball}.partial-{os.getpid()}"
            self._logged(["tar", "-cpf", partial, "-C", str(self.dir), "."], timeout=300)
            os.replace(partial, tarball)

    def _prepare(self) -> None:
        assert self.dir is not None
        shutil.copyfile("/etc/resolv.conf", self.dir / "etc/resolv.conf")  # follows a symlink
        # This machine's own CA certificates (a network that inspects TLS has one): the root
        # uses this machine's network, so it needs them as it needs resolv.conf. Debian's
        # ca-certificates, installed by the provisioning, adds them to the root's bundle.
        if LOCAL_CAS.is_dir():
            shutil.copytree(LOCAL_CAS, self.dir / str(LOCAL_CAS).lstrip("/"),
                            dirs_exist_ok=True)
        # As in any chroot: packages may not start services (there is no init to own them).
        policy = self.dir / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        dest = self.dir / GUEST_REPO.lstrip("/")
        for rel in checkout_files():
            src = REPO / rel
            if src.is_symlink() or src.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel, follow_symlinks=False)
        if self.archive is not None:
            shutil.copytree(self.archive, self.dir / GUEST_ARCHIVE.lstrip("/"))

    # -- running -------------------------------------------------------------------------
    def run(self, command: str, timeout: float = 900) -> tuple[int, str]:
        """Run a shell command line in the root (cwd: the checkout's copy) as root, with a
        clean environment; returns (exit status, output). The output is also appended to the
        log."""
        assert self.dir is not None
        env = [f"{k}={os.environ[k]}" for k in PASS_ENV if os.environ.get(k)]
        argv = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork",
                "--kill-child", "--ipc", "--uts", "--", "bash", "-c", ENTER, "enter",
                str(self.dir), "/usr/bin/env", "-i",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME=/root", "LANG=C.UTF-8", "TERM=dumb", *env,
                "bash", "-c", f"cd {GUEST_REPO} && {command}"]
        started = time.monotonic()
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the group of the unshare started here
                proc.wait()
                rc = -1
            out.seek(0)
            text = out.read()
        with self.log.open("a") as log:
            log.write(f"$ [fresh root] {command}\n{text}[exit {rc} after "
                      f"{time.monotonic() - started:.0f} s]\n")
        return rc, text

    # -- tear-down -----------------------------------------------------------------------
    def leftover_mounts(self) -> list[str]:
        """Mount points under the root as this process sees them (should be none: they were
        made in the commands' private mount namespaces)."""
        if self.dir is None:
            return []
        prefix = str(self.dir)
        points = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
        return points

    def __exit__(self, *exc: object) -> None:
        if self.dir is None:
            return
        leftovers = self.leftover_mounts()
        for point in sorted(leftovers, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False)
        if self.keep:
            print(f"fresh_root: kept {self.dir}", file=sys.stderr)
            return
        if self.leftover_mounts():  # never delete through a mount into the host
            raise RuntimeError(f"{self.dir}: still mounted, not removed: {leftovers}")
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.dir)], check=True)
        self.dir = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", type=Path, help="prebuilt p4lang archive dir to hand in "
                        f"(as {GUEST_ARCHIVE})")
    parser.add_argument("--keep", action="store_true", help="keep the root afterwards")
    parser.add_argument("command", nargs="+", help="shell command line, run in the checkout")
    args = parser.parse_args()
    log = Path(tempfile.mkstemp(prefix="mrc-fresh-root-", suffix=".log")[1])
    with FreshRoot(log, archive=args.archive, keep=args.keep) as root:
        rc, text = root.run(" ".join(args.command))
    print(text, end="")
    print(f"fresh_root: exit {rc}; timings {root.timings}; log {log}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
