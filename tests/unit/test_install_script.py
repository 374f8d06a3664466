"""scripts/install-p4lang.sh: the route it picks, its final check, and the refusal of a BMv2
without --priority-queues. The routes' installs need the network or root changes, so they
are exercised with --dry-run; the archive route is what CI itself runs (.ci/run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support import require_bmv2

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-p4lang.sh"
DEBIAN12 = Path("/etc/os-release").exists() and 'VERSION_ID="12"' in Path(
    "/etc/os-release").read_text() and "debian" in Path("/etc/os-release").read_text()


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def test_syntax_and_help() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    out = run("--help").stdout
    assert "--method" in out and "priority-queues" in out
    bad = run("--method", "magic")
    assert bad.returncode == 2 and "--method must be" in bad.stderr


@pytest.mark.skipif(not DEBIAN12, reason="the route choice below is Debian 12's")
def test_route_choice_on_debian(tmp_path: Path) -> None:
    archive = tmp_path / "p4lang"
    archive.mkdir()
    (archive / "install.sh").write_text("#!/bin/sh\nexit 0\n")
    out = run("--dry-run", env={"P4LANG_ARCHIVE": str(archive)}).stdout
    assert "route: archive" in out and f"bash {archive}/install.sh" in out
    out = run("--dry-run", env={"P4LANG_ARCHIVE": str(tmp_path / "none")}).stdout
    assert "route: source" in out and "v1.2.4.15" in out and "1.15.1" in out
    assert "about 33 minutes" in out and "would run: apt-get" in out
    out = run("--dry-run", "--method", "packages").stderr
    assert "Ubuntu only" in out


def test_check_refuses_bmv2_without_priority_queues(tmp_path: Path) -> None:
    for tool, body in (("p4c-bm2-ss", "echo 'Version 1.2.4.2'"),
                       ("simple_switch_CLI", "exit 0"),
                       ("simple_switch_grpc", "echo 'Usage: simple_switch_grpc --thrift-port'")):
        path = tmp_path / tool
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    result = run("--check", env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert result.returncode != 0
    assert "no --priority-queues" in result.stderr and "1.15.1" in result.stderr


def test_check_passes_with_the_installed_toolchain() -> None:
    require_bmv2()
    result = run("--check")
    assert result.returncode == 0, result.stderr
    assert "ok:" in result.stdout and "1.15" in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="plays another user: root")
def test_a_source_tree_another_user_made_is_refused_before_anything_runs(tmp_path: Path):
    """The source route builds and runs what is in SRC_DIR as root: a folder another user
    made (who could have put any code there first) is refused, before apt or git."""
    shared = Path(tempfile.mkdtemp(prefix="mrc-test-shared-", dir="/tmp"))
    try:
        shared.chmod(0o1777)
        src = shared / "p4lang-src"
        made = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "mkdir", "-m", "777", str(src)], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        out = run("--dry-run", "--method", "source",
                  env={"SRC_DIR": str(src), "P4LANG_ARCHIVE": str(tmp_path / "none")})
        assert out.returncode == 2 and f"refusing {src}" in out.stderr, out.stderr
        assert "would run" not in out.stdout
    finally:
        shutil.rmtree(shared)
