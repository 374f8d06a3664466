"""The default fabric over three emulated servers, as a user runs it: `two_tier.py --cluster
FILE` on the first server (inside server 0, as a cluster's first machine would run it), on each
switch target. The placement is the plane cut, the demo's transfer is verified byte for byte
while a link between two servers fails and recovers, no EV on a healthy route is retired, and
afterwards no server holds anything of the run. Killing the first server's process mid-run
leaves nothing on the other servers, and the next run cleans the first."""

from __future__ import annotations

import json
import os
import re
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
    init, sshd and this probe, run state but the lock file, work directories, the run's
    nftables tables (shield, guards, cuts)."""
    probe = ("ip -o link | cut -d: -f2; echo --; ps -eo args; echo --; "
             "ls -A /run/mrc-testbed 2>/dev/null; echo --; ls -A /tmp; echo --; "
             "nft list tables")
    out = servers.run(i, ["sh", "-c", probe], capture_output=True, text=True).stdout
    links, procs, rundir, tmp, tables = (part.split("\n") for part in out.split("--\n"))
    found = [f"link {n.strip()}" for n in links if n.strip() not in ("", "lo", "ul0@if2")
             and not n.strip().startswith("ul0")]
    found += [f"process {p}" for p in procs[1:] if p and not any(
        k in p for k in ("-c import contextlib", "sshd", "ps -eo", "sh -c ip -o link"))]
    found += [f"run file {n}" for n in rundir if n and n != "fabric.lock"]
    found += [f"nft {t}" for t in tables if " mrc_" in t]
    return found + [f"tmp {n}" for n in tmp if n]


# The port rate each target runs at. BMv2's default (250, "target") is a single machine's with
# CPU to spare; three emulated servers add VXLAN and a bridge per crossing link on the same two
# cores, and there it was emulation-bound (CPUs 98% busy, PSI 0.84 under one busy loop, EVs on
# healthy routes retired when a switch process stalled), so the checks went unjudged, or, when
# PSI read just below its bound, failed. `--rate auto` picks 130-150 for this placement (29 s of
# calibration); at 120 the runs were faithful, PSI 0.27-0.31 idle and 0.41-0.45 beside a busy
# loop, every one judged with no healthy retirement.
DEMO_RATE = {"soft": "target", "bmv2": "120"}


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_demo_over_three_servers(servers: EmulatedServers, target: str) -> None:
    if target == "bmv2":
        require_bmv2()
    done = servers.run(0, two_tier(servers, "--json", "--target", target,
                                   "--rate", DEMO_RATE[target]),
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
    # The failed link is h3's NIC, which h3's agent announces (PORT_STATUS): the sender may
    # stop using that plane before it sends there again (1 CI run in 2 on soft), and then
    # there is nothing to bypass. Either way the transfer kept its goodput.
    note = failure.get("bypass_note") or ""
    assert failure["bypass_s"] is not None or note == (
        "nothing to bypass: no data went onto the failed route after the failure began"), note
    checks = report["checks"]  # not judged when the run was emulation-bound (the CPUs)
    assert checks["goodput_after_failure_ok"] or not checks["judged"], checks
    assert failure["reinstated_after_up"]
    # like the goodput check: a run the CPUs could not keep up with is not judged (BMv2
    # stalls then retire EVs on healthy routes too; docs/benchmarks.md, "The agents' hold")
    assert checks["no_healthy_route_retirements"] or not checks["judged"], failure["retired"]
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


CLI_SCRIPT = """\
mrc_link cut p0l1 h3
mrc_write 0 3 300000
mrc_stats 3
mrc_link up p0l1 h3
mrc_nic down 3 1
mrc_write 0 3 300000
mrc_nic up 3 1
mrc_reboot p2l1
mrc_write 0 3 300000
mrc_link down p2l1 h3
mrc_write 3 0 300000
mrc_link up p2l1 h3
mrc_write 0 3 300000
"""


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_cli_failures_across_servers(servers: EmulatedServers, target: str) -> None:
    """The Mininet CLI's failure commands on links and switches of other servers, as a lab
    script (two_tier.py --script): a cable cut between srv0 and srv2 (h3's NIC stays up, the
    underlay drops its frames), a NIC down and up, a switch on srv1 rebooted, a link down and
    up; every transfer after each is verified byte for byte, and nothing is left behind."""
    if target == "bmv2":
        require_bmv2()
    script = servers.tmpdir / f"lab-{target}.mn"
    script.write_text(CLI_SCRIPT)
    done = servers.run(0, two_tier(servers, "--no-demo", "--target", target, "--rate",
                                   "target", "--script", str(script)),
                       capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=str(REPO))
    out = done.stdout
    print(out[-3000:])
    assert done.returncode == 0, (out[-2000:], done.stderr[-3000:])
    assert out.count(" verified in ") == 5, out
    stats = out.split("--- h3", 1)[1]
    plane0 = re.search(r"^\s*0\s+(yes|NO)\s", stats, re.MULTILINE)
    assert plane0 and plane0.group(1) == "yes", stats  # cut, not down: the NIC never saw it
    mended = re.search(r"link p0l1 - h3 up \(the cut dropped (\d+) frames\)", out)
    assert mended and int(mended.group(1)) > 0, out
    assert "p2l1 rebooted and reprogrammed" in out
    assert [leftovers(servers, i) for i in range(3)] == [[], [], []]


def verdicts(scenarios: dict) -> dict:
    """Which scenario and contender run was not ok, from the bench's results (a CI run once
    exited 1 with no more said): {scenario: (ok, error, {contender: {run: summary ok}})}."""
    def runs(contender: dict) -> dict:
        return {name: (run.get("summary") or {}).get("ok") for name, run in contender.items()
                if isinstance(run, dict)}
    return {name: (sc.get("ok"), sc.get("error"),
                   {c: runs(v) for c, v in sc.get("contenders", {}).items()})
            for name, sc in scenarios.items()}


def test_bench_failures_over_three_servers(servers: EmulatedServers) -> None:
    """`python -m bench link-failure,plane-failure --cluster FILE`: the bench's link failure
    (the busiest plane-0 uplink, found from the T0's counters through its node) and its
    plane failure (the receiver's plane-0 NIC: h3 on srv2 to p0l1 on srv0, a tunnel), with
    MRC and the RoCE-like baseline. MRC completes both; RoCE completes the link failure
    (routing repairs it) but not the plane failure (its one NIC is dead), as on one machine;
    nothing is left on any server."""
    out = servers.tmpdir / "bench"
    done = servers.run(0, ["env", f"PYTHONPATH={REPO}", PYTHON, "-m", "bench",
                           "link-failure,plane-failure", "--quick", "--target", "soft",
                           "--contenders", "mrc,roce", "--no-progress", "--out", str(out),
                           "--cluster", str(cluster_file(servers))],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=str(REPO))
    results = out / "results.json"
    scenarios = json.loads(results.read_text())["scenarios"] if results.exists() else {}
    assert done.returncode == 0, (verdicts(scenarios), done.stdout[-1500:],
                                  done.stderr[-3000:])
    for name in ("link-failure", "plane-failure"):
        print(name, json.dumps(scenarios[name]["figures"]))
    figures = scenarios["link-failure"]["figures"]
    assert figures["mrc"]["completed"] and figures["roce"]["completed"], figures
    assert figures["mrc"]["healthy_route_retirements"] == 0, figures
    figures = scenarios["plane-failure"]["figures"]
    assert figures["mrc"]["completed"] and not figures["roce"]["completed"], figures
    link = scenarios["link-failure"]["contenders"]["mrc"]["failed"]["failure"]
    assert link["link"][0] == "p0l0" and sum(link["uplink_packets_before"].values()) > 0, link
    nic = scenarios["plane-failure"]["contenders"]["mrc"]["failed"]["failure"]
    assert nic["nic"] == [3, 0], nic
    assert [leftovers(servers, i) for i in range(3)] == [[], [], []]
