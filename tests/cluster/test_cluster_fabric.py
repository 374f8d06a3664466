"""The default fabric over three emulated servers, as a user runs it: `two_tier.py --cluster
FILE` on the first server (inside server 0, as a cluster's first machine would run it), on each
switch target. The placement is the plane cut, the demo's transfer is verified byte for byte
while a link between two servers fails and recovers, no EV on a healthy route is retired, and
afterwards no server holds anything of the run. Killing the first server's process mid-run
leaves nothing on the other servers, and the next run cleans the first."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.cluster.servers import EmulatedServers, children
from tests.support import require_bmv2

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]
PYTHON = str(REPO / ".venv" / "bin" / "python")
RUN_TIMEOUT_S = 300


def cluster_file(servers: EmulatedServers) -> Path:
    path = servers.tmpdir / "cluster.json"
    path.write_text(json.dumps({
        "ssh_config": str(servers.ssh_config_path),
        "servers": [{"name": s.name, "address": s.address} for s in servers.servers]}))
    return path


def two_tier(servers: EmulatedServers, *args: str) -> list[str]:
    return [PYTHON, str(REPO / "topologies" / "two_tier.py"), "--no-cli",
            "--cluster", str(cluster_file(servers)), *args]


def leftovers(servers: EmulatedServers, i: int) -> list[str]:
    """What of a run is still on server i: interfaces but the underlay's, processes but
    init, sshd and this probe, run state but the lock file, work directories."""
    probe = ("ip -o link | cut -d: -f2; echo --; ps -eo args; echo --; "
             "ls -A /run/mrc-testbed 2>/dev/null; echo --; ls -A /tmp")
    out = servers.run(i, ["sh", "-c", probe], capture_output=True, text=True).stdout
    links, procs, rundir, tmp = (part.split("\n") for part in out.split("--\n"))
    found = [f"link {n.strip()}" for n in links if n.strip() not in ("", "lo", "ul0@if2")
             and not n.strip().startswith("ul0")]
    found += [f"process {p}" for p in procs[1:] if p and not any(
        k in p for k in ("-c import contextlib", "sshd", "ps -eo", "sh -c ip -o link"))]
    found += [f"run file {n}" for n in rundir if n and n != "fabric.lock"]
    return found + [f"tmp {n}" for n in tmp if n]


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_demo_over_three_servers(servers: EmulatedServers, target: str) -> None:
    if target == "bmv2":
        require_bmv2()
    done = servers.run(0, two_tier(servers, "--json", "--target", target, "--rate", "target"),
                       capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=str(REPO))
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{target}: bring-up {report['bringup_s']}, cluster {report['cluster']}, "
          f"goodput {report['transfer']['goodput_of_capacity']:.0%}, checks {report['checks']}")
    cluster = report["cluster"]
    assert cluster["strategy"] == "plane" and cluster["servers"] == ["srv0", "srv1", "srv2"]
    assert cluster["switches_per_server"] == [8, 4, 4] and cluster["crossing_links"] == 10
    transfer = report["transfer"]
    assert transfer["ok"] and transfer["verified"], transfer
    assert all(n > 0 for n in report["per_plane_tx_packets"].values())
    failure = report["failure"]
    a, b = failure["link"]
    assert {a, b} == {"p0l1", "h3"}, failure["link"]  # p0l1 on srv0, h3 on srv2: a tunnel
    assert failure["bypass_s"] is not None, failure.get("bypass_note")
    assert failure["reinstated_after_up"]
    assert report["checks"]["no_healthy_route_retirements"], failure["retired"]
    for i in range(3):
        assert leftovers(servers, i) == [], (i, done.stderr[-2000:])


def test_a_killed_first_server_leaves_nothing_on_the_others(servers: EmulatedServers) -> None:
    log = servers.tmpdir / "killed.log"
    with open(log, "wb") as out:
        run = servers.popen(0, two_tier(servers, "--target", "soft", "--rate", "target"),
                            stdout=out, stderr=out, cwd=str(REPO))
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while b"fabric up" not in log.read_bytes():
            assert run.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(2.0)  # the demo's transfer runs: kill it while it holds every server
        inner = children(run.pid)  # nsenter's child is the script
        assert inner and run.poll() is None, log.read_text()[-3000:]
        os.kill(inner[0], signal.SIGKILL)
    finally:
        run.wait(30)
    deadline = time.monotonic() + 30
    while any(leftovers(servers, i) for i in (1, 2)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [leftovers(servers, i) for i in (1, 2)] == [[], []]
    again = servers.run(0, two_tier(servers, "--target", "soft", "--rate", "target",
                                    "--no-demo"), capture_output=True, text=True,
                        timeout=RUN_TIMEOUT_S, cwd=str(REPO))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "cleaned up after a run that was killed" in again.stdout + again.stderr
    assert [leftovers(servers, i) for i in range(3)] == [[], [], []]


def test_paths_128_comes_up_over_three_servers(servers: EmulatedServers) -> None:
    """The scale preset over the emulated servers: placed, up, the demo verified. Its
    bring-up time is printed, indicative only (one kernel, two cores, every ssh local)."""
    done = servers.run(0, two_tier(servers, "--json", "--target", "soft", "--rate", "250",
                                   "--fabric", "paths-128"),
                       capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=str(REPO))
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"paths-128 over 3 servers: bring-up {report['bringup_s']}, {report['cluster']}")
    assert report["cluster"]["switches_per_server"] == [54, 54, 36]
    assert report["cluster"]["crossing_links"] == 21
    assert report["transfer"]["verified"]
    assert [leftovers(servers, i) for i in range(3)] == [[], [], []]
