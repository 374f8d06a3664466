"""scripts/provision.sh and the boundary install-p4lang.sh stops at with --stop-at-external,
without installing anything: its options, and for each route (as the route would be chosen
on Ubuntu 22.04, on Debian 12 with and without the prebuilt archive) what it would fetch
from beyond the package archives. tests/lab/test_fresh_root.py runs the real thing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.lab.fresh_root import debian_mirror

REPO = Path(__file__).resolve().parents[2]
PROVISION = REPO / "scripts" / "provision.sh"
INSTALL = REPO / "scripts" / "install-p4lang.sh"


def run(script: Path, *args: str, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def os_release(tmp_path: Path, distro: str, version: str) -> str:
    path = tmp_path / f"os-release-{distro}-{version}"
    path.write_text(f'ID={distro}\nVERSION_ID="{version}"\nPRETTY_NAME="{distro} {version}"\n')
    return str(path)


def test_provision_options() -> None:
    assert subprocess.run(["bash", "-n", str(PROVISION)]).returncode == 0
    assert os.access(PROVISION, os.X_OK)
    help_text = run(PROVISION, "--help").stdout
    for word in ("--stop-at-external", "--no-p4", "cores", "memory", "disk", "time",
                 "1.2 GB per compile job", "openSUSE Build Service", "GitHub"):
        assert word in help_text, word
    bad = run(PROVISION, "--frobnicate")
    assert bad.returncode == 2 and "unknown argument" in bad.stderr


def test_packages_route_stops_before_the_build_service(tmp_path: Path) -> None:
    """The VM's route (Ubuntu 22.04): Ubuntu's archive for curl, gnupg and python3-thrift,
    then the p4lang repository on the openSUSE Build Service."""
    result = run(INSTALL, "--dry-run", "--stop-at-external",
                 env={"OS_RELEASE": os_release(tmp_path, "ubuntu", "22.04")})
    assert result.returncode == 3, result.stdout + result.stderr
    assert "route: packages" in result.stdout
    assert "apt-get install -y -qq curl gnupg ca-certificates python3-thrift" in result.stdout
    assert ("would stop here, before fetching the p4lang apt repository's key and package "
            "lists from https://download.opensuse.org/repositories/home:/p4lang:/latest/"
            "xUbuntu_22.04/") in result.stdout
    assert "p4lang-p4c" not in result.stdout  # nothing after the boundary


def test_source_route_stops_before_github(tmp_path: Path) -> None:
    result = run(INSTALL, "--dry-run", "--stop-at-external",
                 env={"OS_RELEASE": os_release(tmp_path, "debian", "12"),
                      "P4LANG_ARCHIVE": str(tmp_path / "no-archive")})
    assert result.returncode == 3, result.stdout + result.stderr
    assert "route: source" in result.stdout and "libgrpc++-dev" in result.stdout
    assert "before fetching the sources of PI v0.1.1, behavioral-model 1.15.1 and p4c " \
        "v1.2.4.15 from https://github.com/p4lang" in result.stdout
    assert "git clone" not in result.stdout


def test_archive_route_has_no_boundary(tmp_path: Path) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the archive route is amd64 only")
    archive = tmp_path / "p4lang"
    archive.mkdir()
    (archive / "install.sh").write_text("#!/bin/sh\nexit 0\n")
    result = run(INSTALL, "--dry-run", "--stop-at-external",
                 env={"OS_RELEASE": os_release(tmp_path, "debian", "12"),
                      "P4LANG_ARCHIVE": str(archive)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "route: archive" in result.stdout and "stop" not in result.stdout


def test_debian_mirror_from_apt_sources(tmp_path: Path) -> None:
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list.d" / "other.sources.disabled").write_text(
        "Types: deb\nURIs: http://wrong.example/debian\nSuites: bookworm\n")
    (etc / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb deb-src\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n")
    assert debian_mirror(etc) == "http://mirror.example/debian"
    (etc / "sources.list").write_text(
        "deb [arch=amd64] http://listed.example/debian bookworm main # note\n")
    assert debian_mirror(etc) == "http://listed.example/debian"
    assert debian_mirror(tmp_path / "none") is None  # debootstrap's default then
