"""`mn --custom topologies/custom.py` protects its switches as MrcNetwork does: the run's keys
in the private run directory, the control-port shield, both gone when mn exits."""

from __future__ import annotations

import atexit
import os
import subprocess

import pytest

from fabric.topology import Fabric
from p4rt import tls
from topologies import custom
from topologies.credentials import CONTROL_TOKEN
from topologies.privdir import RUN_DIR_ENV


@pytest.mark.skipif(os.geteuid() != 0, reason="installs an nftables table: root")
def test_mn_custom_issues_keys_and_a_shield_and_removes_both(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    release = custom._protect(Fabric(1, 1, 1, 1))
    atexit.unregister(release)
    creds, manifest, _rundir = custom._run
    custom._run.clear()
    table = manifest.data["nft_tables"][0]
    try:
        names = {p.name for p in (tmp_path / "run").iterdir()}
        assert {tls.CA_CERT, tls.CLIENT_KEY, tls.SERVER_KEY, CONTROL_TOKEN} <= names
        listed = subprocess.run(["nft", "list", "table", "inet", table], capture_output=True,
                                text=True)
        assert listed.returncode == 0 and "skuid != 0" in listed.stdout
    finally:
        release()
    assert list((tmp_path / "run").iterdir()) == []
    assert subprocess.run(["nft", "list", "table", "inet", table],
                          capture_output=True).returncode != 0
