"""scripts/provision.sh on a machine that has nothing yet: a fresh Debian 12 minbase root
(tests/lab/fresh_root.py: debootstrap from this machine's Debian mirror, chroot in private
mount/PID namespaces, removed afterwards), provisioned with `--stop-at-external`.

Where it stops: without the prebuilt p4lang archive beside the checkout, a Debian 12 machine
takes install-p4lang.sh's source route. Everything up to the `git clone` of PI,
behavioral-model and p4c from https://github.com/p4lang is done for real and from package
archives only: the resource check, Debian's packages for the testbed (Mininet, python3-venv,
...), the project's .venv from PyPI, and the source route's build dependencies from Debian.
Then it stops (exit 3), naming that download. The VM's own route (Ubuntu 22.04, the p4lang
packages) would stop before https://download.opensuse.org; that route cannot run on Debian
and is checked by dry run in test_provision_script.py.

Afterwards, inside the root: the .venv imports Mininet, scapy, p4runtime-shell and the
project, `./testbed test --collect-only` collects the suite (and its set-up installs nothing
a second time), and the root is gone again afterwards.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests.lab.fresh_root import FreshRoot

pytestmark = [pytest.mark.slow, pytest.mark.root]


@pytest.mark.timeout(1800)
def test_provision_in_a_fresh_debian_12_root(tmp_path: Path) -> None:
    for tool in ("debootstrap", "unshare", "chroot"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian 12: apt-get install debootstrap; "
                        ".ci/run installs it)")
    log = tmp_path / "fresh-root.log"
    started = time.monotonic()
    with FreshRoot(log) as root:
        root_dir = root.dir
        assert root_dir is not None
        t = time.monotonic()
        rc, out = root.run("scripts/provision.sh --stop-at-external", timeout=1500)
        root.timings["provision.sh --stop-at-external"] = time.monotonic() - t
        assert rc == 3, out[-4000:]
        assert "provision: this machine:" in out
        assert "install-p4lang: route: source (Debian GNU/Linux 12 (bookworm)" in out
        assert re.search(r"install-p4lang: stopped before fetching the sources of PI \S+, "
                         r"behavioral-model \S+ and p4c \S+ from https://github.com/p4lang",
                         out), out[-3000:]
        assert re.search(r"provision: \.venv \(Python 3\.11\) imports \d+ modules", out), out
        # the source route's build dependencies came from Debian's archive before the stop
        rc, out = root.run("dpkg-query -W -f='${Status}\\n' cmake libgrpc++-dev "
                           "thrift-compiler libboost-graph-dev | sort | uniq -c")
        assert rc == 0 and re.search(r"\s4 install ok installed", out), out

        rc, out = root.run(".venv/bin/python -c 'import mininet.net, scapy.all, "
                           "p4runtime_sh.shell, host_agent.agent, emulation.network; "
                           "print(\"imports ok\")'")
        assert rc == 0 and "imports ok" in out, out
        t = time.monotonic()
        rc, out = root.run("./testbed test --collect-only -q -p no:cacheprovider")
        root.timings["./testbed test --collect-only"] = time.monotonic() - t
        assert rc == 0, out[-4000:]
        assert "testbed: installing" not in out and "testbed: building" not in out, out
        collected = re.search(r"(\d+) tests? collected", out)
        assert collected and int(collected.group(1)) > 100, out[-2000:]
    assert not root_dir.exists(), "the fresh root was not removed"
    timings = ", ".join(f"{k} {v:.0f} s" for k, v in root.timings.items())
    print(f"fresh root: {timings}; total {time.monotonic() - started:.0f} s (log: {log})")
