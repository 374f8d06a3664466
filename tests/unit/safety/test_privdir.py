"""Root trusts no file another user could have made: an unprivileged user (nobody) plants the
run directory, the fabric lock or the run manifest as a regular file, a symbolic link or a
FIFO; the run refuses or ignores it, and nothing the planted file names is touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from safety.privdir import (
    ROOT_RUN_DIR,
    RUN_DIR_ENV,
    PrivateDir,
    UnsafePathError,
    check_workdir,
    default_run_dir,
)
from safety.runstate import LOCK_NAME, MANIFEST_NAME, acquire_fabric_lock, clean_leftovers
from tests.support import NOBODY, as_nobody

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plays an unprivileged user: root")


@pytest.fixture
def victims(shared_tmp: Path) -> Iterator[dict]:
    """What a planted file would name: a process, an interface and a directory of root's."""
    proc = subprocess.Popen(["sleep", "60"])
    name = f"mrcv{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p"],
                   check=True)
    directory = Path(tempfile.mkdtemp(prefix="mrc-test-victim-"))
    try:
        yield {"pid": proc.pid, "interface": name, "dir": directory, "proc": proc}
    finally:
        proc.kill()
        proc.wait()
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


def untouched(v: dict) -> bool:
    return (v["proc"].poll() is None and Path(f"/sys/class/net/{v['interface']}").exists()
            and v["dir"].is_dir())


def manifest_naming(v: dict) -> str:
    with open(f"/proc/{v['pid']}/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19])
    return json.dumps({"owner": [1, 0], "pids": [[v["pid"], started]],
                       "interfaces": [v["interface"]], "workdir": str(v["dir"]),
                       "own_workdir": True})


def test_root_runs_keep_their_state_in_a_root_only_directory(monkeypatch) -> None:
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    assert default_run_dir() == ROOT_RUN_DIR
    with PrivateDir() as d:
        st = os.stat(d.path)
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700)
    planted = as_nobody(f"touch {ROOT_RUN_DIR}/{MANIFEST_NAME}")
    assert planted.returncode != 0 and "Permission denied" in planted.stderr


def test_the_old_fixed_names_in_tmp_are_ignored(shared_tmp: Path, victims: dict,
                                                tmp_path: Path) -> None:
    """Before: /tmp/mrc-testbed-run.json and -fabric.lock steered the next root run."""
    temp = tempfile.gettempdir()
    manifest, lock = Path(temp, "mrc-testbed-run.json"), Path(temp, "mrc-testbed-fabric.lock")
    for path in (manifest, lock):
        assert not path.exists() or path.stat().st_uid == 0, f"{path} planted already"
    script = (f"cat > {manifest} <<'EOF'\n{manifest_naming(victims)}\nEOF\n"
              f"exec flock {lock} sleep 30")
    holder = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                               "--clear-groups", "sh", "-c", script])
    try:
        with PrivateDir(tmp_path / "run") as rundir:
            fd = acquire_fabric_lock(2.0, log=lambda *_: None, rundir=rundir)
            os.close(fd)
            assert clean_leftovers(lambda *_: None, rundir) is None
        assert untouched(victims)
    finally:
        holder.kill()
        holder.wait()
        manifest.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo", "file"])
def test_a_run_directory_planted_by_another_user_is_refused(shared_tmp: Path, kind: str,
                                                            victims: dict) -> None:
    run = shared_tmp / "run"
    plant = {"directory": f"mkdir {run} && chmod 700 {run}",
             "symlink": f"ln -s {victims['dir']} {run}",
             "fifo": f"mkfifo {run}", "file": f"touch {run}"}[kind]
    assert as_nobody(plant).returncode == 0
    with pytest.raises(UnsafePathError, match=str(run)):
        PrivateDir(run)
    assert untouched(victims) and list(victims["dir"].iterdir()) == []


def test_nobody_can_plant_inside_a_private_directory(shared_tmp: Path) -> None:
    with PrivateDir(shared_tmp / "run") as rundir:
        for how in (f"touch {rundir.path}/{LOCK_NAME}", f"ln -s /etc {rundir.path}/x",
                    f"mkfifo {rundir.path}/{MANIFEST_NAME}"):
            assert as_nobody(how).returncode != 0
        assert list(rundir.path.iterdir()) == []


@pytest.mark.parametrize("kind", ["foreign", "symlink", "fifo", "hardlink", "open-mode"])
@pytest.mark.parametrize("name", [LOCK_NAME, MANIFEST_NAME])
def test_a_planted_file_in_the_run_directory_is_refused(tmp_path: Path, victims: dict,
                                                        kind: str, name: str) -> None:
    """Files as a planter would leave them had it got in (made here by root, then given
    away): the lock and the manifest are refused, never followed or acted on."""
    with PrivateDir(tmp_path / "run") as rundir:
        path = rundir.path / name
        target = victims["dir"] / "target"
        target.write_text(manifest_naming(victims))
        if kind == "foreign":
            path.write_text(manifest_naming(victims))
            os.chown(path, NOBODY, NOBODY)
        elif kind == "symlink":
            path.symlink_to(target)
        elif kind == "fifo":
            os.mkfifo(path, 0o600)
        elif kind == "hardlink":
            os.link(target, path)
        else:
            path.write_text(manifest_naming(victims))
            path.chmod(0o666)
        with pytest.raises(UnsafePathError, match=str(path)):
            if name == LOCK_NAME:
                acquire_fabric_lock(1.0, log=lambda *_: None, rundir=rundir)
            else:
                clean_leftovers(lambda *_: None, rundir)
        assert untouched(victims) and target.read_text() == manifest_naming(victims)


def test_a_work_directory_of_another_user_is_refused(shared_tmp: Path) -> None:
    work = shared_tmp / "work"
    assert as_nobody(f"mkdir -m 777 {work}").returncode == 0
    with pytest.raises(UnsafePathError, match="writable by nobody else"):
        check_workdir(work)
    check_workdir(shared_tmp / "mine")  # a new one is made 0700
    assert (shared_tmp / "mine").stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(shutil.which("p4c-bm2-ss") is None, reason="needs p4c")
def test_a_p4_compile_cache_another_user_could_write_is_refused(shared_tmp: Path,
                                                                monkeypatch) -> None:
    """The grader runs the cached mrc.json on BMv2 as the program it grades: a cache folder
    another user made (and could fill with any program) is refused, not read."""
    from rubrics import p4

    cache = shared_tmp / "p4c"
    assert as_nobody(f"mkdir -m 777 {cache}").returncode == 0
    monkeypatch.setenv(p4.CACHE_ENV, str(cache))
    with pytest.raises(UnsafePathError, match=str(cache)):
        p4.compile_program(Path(__file__).resolve().parents[3])
    assert list(cache.iterdir()) == []


def test_bench_results_are_not_written_into_another_users_folder(shared_tmp: Path) -> None:
    """`python -m bench --out DIR` as root: a DIR another user made (or a link they planted
    on the way) is refused before anything runs, and nothing is written there."""
    out = shared_tmp / "results"
    assert as_nobody(f"mkdir -m 777 {out}").returncode == 0
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-m", "bench", "permutation", "--quick", "--out",
                           str(out)], cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and str(out) in done.stderr, done.stderr
    assert list(out.iterdir()) == []
