"""The Vagrantfile, checked as far as a machine that cannot boot a VM can: Vagrant validates
it (Debian 12's `vagrant` 2.3.4; `.ci/run` installs it), provider-independently and then once
per provider so each provider block's settings are checked by that provider's own code, and
it provisions with scripts/provision.sh and nothing else. Nothing here downloads the box or
starts a VM: Vagrant runs with an empty HOME and a proxy that refuses every connection, and
the test checks that no box arrived."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VAGRANTFILE = REPO / "Vagrantfile"
VAGRANT = shutil.which("vagrant")
needs_vagrant = pytest.mark.skipif(
    VAGRANT is None, reason="vagrant is not installed (Debian 12: apt-get install vagrant; "
    ".ci/run installs it)")
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, any download fails


def vagrant_validate(home: Path, cwd: Path, *args: str, provider: str | None = None,
                     path_prefix: Path | None = None,
                     servers: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VAGRANT_") and k != "MRC_SERVERS"}
    if servers is not None:
        env["MRC_SERVERS"] = servers
    env.update(HOME=str(home), VAGRANT_HOME=str(home / "vagrant.d"),
               VAGRANT_DOTFILE_PATH=str(home / "dotfile"),  # not .vagrant/ in the checkout
               VAGRANT_CWD=str(cwd), VAGRANT_CHECKPOINT_DISABLE="1",
               VAGRANT_BOX_UPDATE_CHECK_DISABLE="1", http_proxy=DEAD_PROXY,
               https_proxy=DEAD_PROXY, HTTP_PROXY=DEAD_PROXY, HTTPS_PROXY=DEAD_PROXY,
               no_proxy="", NO_PROXY="")
    if provider:
        env["VAGRANT_DEFAULT_PROVIDER"] = provider
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    result = subprocess.run([VAGRANT or "vagrant", "validate", *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=120)
    boxes = home / "vagrant.d" / "boxes"
    assert not boxes.exists() or not any(boxes.iterdir()), "validate fetched a box"
    return result


def fake_vboxmanage(where: Path) -> Path:
    """A stand-in for VirtualBox's VBoxManage that only answers --version: all Vagrant asks
    before it lets its VirtualBox provider validate the `virtualbox` block."""
    where.mkdir()
    tool = where / "VBoxManage"
    tool.write_text('#!/bin/sh\n[ "$1" = --version ] && echo 7.0.14r161095\nexit 0\n')
    tool.chmod(0o755)
    return where


def has_libvirt_plugin(home: Path) -> bool:
    env = {**os.environ, "HOME": str(home), "VAGRANT_HOME": str(home / "vagrant.d"),
           "VAGRANT_CHECKPOINT_DISABLE": "1"}
    out = subprocess.run([VAGRANT or "vagrant", "plugin", "list"], env=env,
                         capture_output=True, text=True, timeout=120).stdout
    return "vagrant-libvirt" in out


@needs_vagrant
def test_validate_ignore_provider(tmp_path: Path) -> None:
    dotdir_before = (REPO / ".vagrant").exists()
    result = vagrant_validate(tmp_path, REPO, "--ignore-provider")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "validated successfully" in result.stdout
    assert (REPO / ".vagrant").exists() == dotdir_before, "validate wrote into the checkout"


@needs_vagrant
def test_validate_virtualbox_block(tmp_path: Path) -> None:
    tools = fake_vboxmanage(tmp_path / "bin")
    result = vagrant_validate(tmp_path, REPO, provider="virtualbox", path_prefix=tools)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_vagrant
def test_validate_libvirt_block(tmp_path: Path) -> None:
    if not has_libvirt_plugin(tmp_path):
        pytest.skip("the vagrant-libvirt plugin is not installed (Debian 12: apt-get install "
                    "--no-install-recommends vagrant-libvirt; .ci/run installs it)")
    result = vagrant_validate(tmp_path, REPO, provider="libvirt")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_vagrant
def test_provider_validation_has_teeth(tmp_path: Path) -> None:
    """The per-provider runs above would catch a misspelt provider setting, which
    --ignore-provider does not look at."""
    project = tmp_path / "project"
    project.mkdir()
    text = VAGRANTFILE.read_text()
    assert "vb.cpus = " in text
    (project / "Vagrantfile").write_text(text.replace("vb.cpus = ", "vb.cpuz = "))
    tools = fake_vboxmanage(tmp_path / "bin")
    home = tmp_path / "home"
    home.mkdir()
    assert vagrant_validate(home, project, "--ignore-provider").returncode == 0
    result = vagrant_validate(home, project, provider="virtualbox", path_prefix=tools)
    assert result.returncode != 0 and "cpuz" in result.stdout + result.stderr


def code_lines() -> list[str]:
    """The Vagrantfile without its comments (a `#` that does not open a `#{...}`)."""
    lines = (re.sub(r"(^|\s)#(?!\{).*$", "", line) for line in VAGRANTFILE.read_text().splitlines())
    return [line for line in lines if line.strip()]


def test_one_recipe() -> None:
    """Provisioning is scripts/provision.sh, which bare metal runs too; the Vagrantfile holds
    no second recipe."""
    code = "\n".join(code_lines())
    provisioners = re.findall(r"config\.vm\.provision\b", code)
    assert len(provisioners) == 1, code
    assert re.search(r'inline:\s*"#\{GUEST_DIR\}/scripts/provision\.sh"', code), code
    for recipe_word in ("apt-get", "apt ", "pip ", "install-p4lang", "testbed setup"):
        assert recipe_word not in code, f"{recipe_word!r} in the Vagrantfile's code"
    assert (REPO / "scripts" / "provision.sh").stat().st_mode & 0o111


def test_both_providers_and_resources_stated() -> None:
    code = "\n".join(code_lines())
    for provider in ("virtualbox", "libvirt"):
        assert re.search(rf'config\.vm\.provider "{provider}"', code), provider
    comments = VAGRANTFILE.read_text()
    for item in ("cores", "memory", "disk", "time", "network"):
        assert re.search(rf"^#\s+{item}\b", comments, re.M), f"resource {item!r} not stated"


@needs_vagrant
def test_validate_a_three_vm_cluster(tmp_path: Path) -> None:
    """MRC_SERVERS=3: three machines on the private network, validated with and without the
    VirtualBox provider's own checks, and nothing made in the checkout by validating."""
    dotdir_before = (REPO / ".vagrant").exists()
    result = vagrant_validate(tmp_path, REPO, "--ignore-provider", servers="3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(f"mrc{i}:" in result.stdout for i in range(3)), result.stdout
    tools = fake_vboxmanage(tmp_path / "bin")
    result = vagrant_validate(tmp_path, REPO, provider="virtualbox", path_prefix=tools,
                              servers="3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (REPO / ".vagrant").exists() == dotdir_before, "validate wrote into the checkout"


@needs_vagrant
@pytest.mark.parametrize("servers", ["0", "9", "three"])
def test_a_bad_server_count_is_refused(tmp_path: Path, servers: str) -> None:
    result = vagrant_validate(tmp_path, REPO, "--ignore-provider", servers=servers)
    assert result.returncode != 0
    assert "MRC_SERVERS must be a number from 1 to 8" in result.stdout + result.stderr


def test_cluster_keys_make_what_provision_installs(tmp_path: Path) -> None:
    """scripts/cluster-keys.sh (the Vagrant host) makes every file provision.sh's step 5
    wants, its cluster file loads as the entry points load it, its ssh_config pins the lab's
    host key and uses the lab's key from where provision.sh puts them, and a second run keeps
    the keys."""
    from emulation.cluster.cluster import from_file

    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (openssh-client) is not installed")
    keys = tmp_path / "keys"
    script = REPO / "scripts" / "cluster-keys.sh"
    done = subprocess.run([str(script), str(keys), "3", "192.168.56"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    provision = (REPO / "scripts" / "provision.sh").read_text()
    wanted = re.search(r"for f in (id_ed25519 .*?); do", provision, re.S)
    assert wanted, "provision.sh's cluster_node lists the files it installs"
    names = wanted.group(1).replace("\\", " ").split()
    assert sorted(p.name for p in keys.iterdir()) == sorted(names)
    assert keys.stat().st_mode & 0o777 == 0o700
    cluster = from_file(keys / "cluster.json")
    assert cluster.names == ["mrc0", "mrc1", "mrc2"]
    assert [s.address for s in cluster.servers] == ["192.168.56.10", "192.168.56.11",
                                                     "192.168.56.12"]
    config = (keys / "ssh_config").read_text()
    assert config.count("StrictHostKeyChecking yes") == 3
    assert "IdentityFile /etc/mrc-testbed/cluster/id_ed25519" in config
    host_key = " ".join((keys / "host_ed25519.pub").read_text().split()[:2])
    assert (keys / "known_hosts").read_text().splitlines()[1] == f"mrc1,192.168.56.11 {host_key}"
    before = (keys / "id_ed25519").read_bytes()
    again = subprocess.run([str(script), str(keys), "2", "10.1.2"], capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0 and (keys / "id_ed25519").read_bytes() == before
    assert from_file(keys / "cluster.json").names == ["mrc0", "mrc1"]
    bad = subprocess.run([str(script), str(keys), "1", "10.1.2"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "SERVERS must be 2..8" in bad.stderr


def test_vagrant_ssh_forwards_the_live_view_on_loopback() -> None:
    """The live view listens on the VM's 127.0.0.1 only; `vagrant ssh` carries it to the
    host's 127.0.0.1 on the same port, the one --web uses by default."""
    from views.liveview import DEFAULT_WEB_PORT, LOOPBACK

    text = VAGRANTFILE.read_text()
    forward = f'config.ssh.extra_args = ["-L", "{DEFAULT_WEB_PORT}:{LOOPBACK}:{DEFAULT_WEB_PORT}"]'
    assert forward in text
