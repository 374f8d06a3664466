"""`mn --custom topologies/custom.py` protects its switches as MrcNetwork does
(safety.runguard): the fabric lock, the run's keys in the private run directory and the
control-port shield, all given back when mn exits."""

from __future__ import annotations

import atexit
import os
import subprocess

import pytest

from fabric.topology import Fabric
from p4rt import tls
from safety.credentials import CONTROL_TOKEN
from safety.privdir import RUN_DIR_ENV, PrivateDir
from safety.runstate import LOCK_NAME, acquire_fabric_lock
from topologies import custom


@pytest.mark.skipif(os.geteuid() != 0, reason="installs an nftables table: root")
def test_mn_custom_issues_keys_and_a_shield_and_removes_both(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    guard = custom._protect(Fabric(1, 1, 1, 1))
    atexit.unregister(guard.release)
    custom._guard.clear()
    table = guard.shield_table
    try:
        names = {p.name for p in (tmp_path / "run").iterdir()}
        assert {tls.CA_CERT, tls.CLIENT_KEY, tls.SERVER_KEY, CONTROL_TOKEN} <= names
        listed = subprocess.run(["nft", "list", "table", "inet", table], capture_output=True,
                                text=True)
        assert listed.returncode == 0 and "skuid != 0" in listed.stdout
        assert guard.credentials is not None
    finally:
        guard.release()
    assert [p.name for p in (tmp_path / "run").iterdir()] == [LOCK_NAME]  # kept, released
    with PrivateDir(tmp_path / "run") as rundir:
        os.close(acquire_fabric_lock(0.5, log=lambda *_: None, rundir=rundir))
    assert subprocess.run(["nft", "list", "table", "inet", table],
                          capture_output=True).returncode != 0
