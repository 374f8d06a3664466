"""Two host agents in two network namespaces joined back to back by one veth pair per plane.

No switches: whatever outer destination a frame carries, it reaches the peer's NIC on that
plane, which is all the raw-socket driver needs. Every namespace, veth and process created here
is named with a per-run prefix and removed in teardown, also when a test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from ipaddress import IPv6Address
from pathlib import Path
from typing import Any

import pytest

import wire
from fabric import hostpaths
from fabric.topology import Fabric
from host_agent.control import ControlClient, ControlError
from safety.procs import stop_process

ROOT = Path(__file__).resolve().parents[2]
PLANES = 2
FABRIC = Fabric(planes=PLANES, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)  # 2 paths/plane

pytestmark = [
    pytest.mark.root,
    pytest.mark.timeout(180),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                       reason="needs root and iproute2 (namespaces, veth, raw sockets)"),
]


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check)


class VethBed:
    """Namespaces, veths and agent processes of one test run; close() undoes exactly those."""

    def __init__(self, tag: str, extra_args: tuple[list[str], list[str]] = ([], [])) -> None:
        self.extra_args = extra_args
        self.prefix = f"mra{os.getpid() % 10000:04d}{tag}"
        self.ns = [f"{self.prefix}h{h}" for h in range(2)]
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        self.sockets = [str(self.tmp / f"h{h}.sock") for h in range(2)]
        self.logs = [str(self.tmp / f"h{h}.log") for h in range(2)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self._made_ns: list[str] = []
        self._made_links: list[str] = []

    def start(self) -> VethBed:
        for ns in self.ns:
            sh("ip", "netns", "add", ns)
            self._made_ns.append(ns)
        for p in range(PLANES):
            ends = [f"{self.prefix}a{p}", f"{self.prefix}b{p}"]
            sh("ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
            self._made_links.append(ends[0])
            for h, (ns, end) in enumerate(zip(self.ns, ends, strict=True)):
                nic = FABRIC.nic(h, p)
                sh("ip", "link", "set", end, "netns", ns)
                sh("ip", "-n", ns, "link", "set", end, "name", nic.ifname)
                sh("ip", "-n", ns, "link", "set", nic.ifname, "address", nic.mac, "up")
        for h in range(2):
            self.procs.append(self._spawn(h))
        for h in range(2):
            self._wait_ready(h)
        return self

    def _spawn(self, host: int) -> subprocess.Popen[bytes]:
        cmd = ["ip", "netns", "exec", self.ns[host], sys.executable, "-m", "host_agent.agent",
               "--host", str(host), "--planes", str(FABRIC.planes), "--t0",
               str(FABRIC.t0_per_plane), "--t1", str(FABRIC.t1_per_plane), "--hosts-per-t0",
               str(FABRIC.hosts_per_t0), "--socket", self.sockets[host], "--log",
               self.logs[host], *self.extra_args[host]]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.Popen(cmd, cwd=ROOT, env=env)  # ip netns exec execs: pid = agent's

    def _wait_ready(self, host: int) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.procs[host].poll() is not None:
                raise RuntimeError(f"agent h{host} exited: {Path(self.logs[host]).read_text()}")
            try:
                with ControlClient(self.sockets[host], timeout=5) as c:
                    c.call("status")
                return
            except ControlError:
                time.sleep(0.1)
        raise RuntimeError(f"agent h{host} not ready after 15 s")

    def client(self, host: int, timeout: float = 120) -> ControlClient:
        return ControlClient(self.sockets[host], timeout=timeout)

    def call(self, host: int, cmd: str, **args: Any) -> dict[str, Any]:
        with self.client(host) as c:
            return c.call(cmd, **args)

    def cpu_seconds(self, host: int) -> float:
        return float(self.call(host, "stats")["cpu_seconds"])

    def close(self) -> None:
        for proc in self.procs:
            stop_process(proc, 10)
        for ns in self._made_ns:
            sh("ip", "netns", "del", ns, check=False)  # takes its veth ends with it
        for link in self._made_links:  # only left if moving it into a namespace failed
            if Path(f"/sys/class/net/{link}").exists():
                sh("ip", "link", "del", link, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def bed():
    tb = VethBed("m")
    try:
        yield tb.start()
    finally:
        tb.close()


def transfer(tb: VethBed, nbytes: int, seed: int, imm: int | None = None) -> dict[str, Any]:
    region = tb.call(1, "register", size=nbytes)
    result = tb.call(0, "write", peer=1, bytes=nbytes, va=region["va"], rkey=region["rkey"],
                     seed=seed, imm=imm, timeout=100)
    check = tb.call(1, "verify", rkey=region["rkey"], length=nbytes, seed=seed)
    tb.call(1, "deregister", rkey=region["rkey"])
    result["verified"] = check["match"]
    return result


def test_write_is_placed_byte_for_byte(bed: VethBed) -> None:
    nbytes = 8_000_000
    before = [bed.call(h, "stats") for h in range(2)]
    seen = bed.call(1, "events")["last"]
    result = transfer(bed, nbytes, seed=1234, imm=0xBEEF)
    after = [bed.call(h, "stats") for h in range(2)]
    assert result["verified"] is True
    assert result["tx_data_packets"] >= nbytes // 1024
    messages = bed.call(1, "messages", since=seen)["messages"]
    assert [(m["length"], m["imm"], m["peer"]) for m in messages] == [(nbytes, 0xBEEF, 0)]
    # a wrong pattern seed must not verify: the check can fail
    region = bed.call(1, "register", size=4096)
    bed.call(0, "write", peer=1, bytes=4096, va=region["va"], rkey=region["rkey"], seed=1)
    assert bed.call(1, "verify", rkey=region["rkey"], length=4096, seed=2)["match"] is False
    for h, name in ((0, "sender"), (1, "receiver")):
        packets = sum(int(after[h]["endpoint"][k]) - int(before[h]["endpoint"][k])
                      for k in ("tx_packets", "rx_packets"))
        cpu = after[h]["cpu_seconds"] - before[h]["cpu_seconds"]
        print(f"\n{name}: {packets} packets, {cpu:.3f} CPU s, "
              f"{cpu / packets * 1000:.4f} CPU s per 1000 packets")
    print(f"goodput over veth: {result['goodput_gbps'] * 1000:.1f} Mbit/s "
          f"({nbytes} bytes in {result['duration_s']:.3f} s, {PLANES} planes)")


def test_write_to_unknown_rkey_is_refused_and_fails_the_qp() -> None:
    """IBTA RC: a remote access error is fatal to the sender's QP (docs/security.md); its own
    bed, since the QP to that peer stays failed."""
    tb = VethBed("r")
    try:
        tb.start()
        region = tb.call(1, "register", size=4096)
        with pytest.raises(ControlError, match="refused by the peer: RKEY_VIOLATION"):
            tb.call(0, "write", peer=1, bytes=4096, va=region["va"],
                    rkey=(region["rkey"] + 1) % (1 << 32), timeout=20)
        with pytest.raises(ControlError, match="QP .* failed"):
            tb.call(0, "write", peer=1, bytes=16, va=region["va"], rkey=region["rkey"])
        assert tb.call(0, "stats")["endpoint"]["qp_failures"] == 1
        back = tb.call(0, "register", size=16)  # the other direction is another QP: it works
        tb.call(1, "write", peer=0, bytes=16, va=back["va"], rkey=back["rkey"], seed=3)
        assert tb.call(0, "verify", rkey=back["rkey"], length=16, seed=3)["match"]
    finally:
        tb.close()


def _events(tb: VethBed, host: int, since: int, kind: str) -> list[dict[str, Any]]:
    return [e for e in tb.call(host, "events", since=since)["events"] if e["type"] == kind]


def _wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_nic_down_mid_transfer_completes_on_other_planes(bed: VethBed) -> None:
    nbytes = 30_000_000
    marks = [bed.call(h, "events")["last"] for h in range(2)]
    region = bed.call(1, "register", size=nbytes)
    outcome: dict[str, Any] = {}

    def write() -> None:
        try:
            outcome["result"] = bed.call(0, "write", peer=1, bytes=nbytes, va=region["va"],
                                         rkey=region["rkey"], seed=77, timeout=150)
        except ControlError as exc:
            outcome["error"] = exc

    start_rx = int(bed.call(1, "stats")["endpoint"]["rx_packets"])
    worker = threading.Thread(target=write)
    worker.start()
    ifname = FABRIC.nic(0, 1).ifname
    try:
        assert _wait_for(lambda: int(bed.call(1, "stats")["endpoint"]["rx_packets"])
                         > start_rx + 2000), "transfer did not start"
        sh("ip", "-n", bed.ns[0], "link", "set", ifname, "down")
        in_progress = bed.call(0, "status")["pending_writes"] == 1
        worker.join(timeout=170)
    finally:
        sh("ip", "-n", bed.ns[0], "link", "set", ifname, "up")
    assert in_progress, "the write finished before the NIC went down: use a bigger transfer"
    assert "error" not in outcome, outcome.get("error")
    assert bed.call(1, "verify", rkey=region["rkey"], length=nbytes, seed=77)["match"]
    down = {"plane": 1, "up": False}
    assert any(e.items() >= down.items() for e in _events(bed, 0, marks[0], "PlaneStateChanged"))
    assert any(e.items() >= {**down, "peer": 0}.items()
               for e in _events(bed, 1, marks[1], "PeerPlaneChanged")), "peer not notified"
    up = {"plane": 1, "up": True, "peer": 0}
    assert _wait_for(lambda: any(e.items() >= up.items()
                                 for e in _events(bed, 1, marks[1], "PeerPlaneChanged")))
    stats = bed.call(0, "stats")
    assert stats["planes_up"] == [True, True]
    assert stats["peer_planes_up"] == {"1": [0, 1]}
    bed.call(1, "deregister", rkey=region["rkey"])


def _frame(src_host: int, dst_host: int, payload: bytes, **changes: Any) -> bytes:
    src, dst = FABRIC.nic(src_host, 0), FABRIC.nic(dst_host, 0)
    fields = dict(src_mac=src.mac, dst_mac=dst.mac, outer_src=src.address,
                  outer_dst=FABRIC.paths(src_host, dst_host, 0)[0].address,
                  inner_src=src.address, inner_dst=dst.address, ev=0x12345678,
                  dscp=wire.DSCP_TRIMMABLE, ecn=wire.ECN_ECT0)
    fields.update(changes)
    return wire.encode_frame(wire.Envelope(**fields), payload)


INJECT = """
import json, socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for frame in json.load(sys.stdin):
    s.send(bytes.fromhex(frame))
"""


def test_malformed_frames_are_counted_and_dropped(bed: VethBed) -> None:
    good = _frame(0, 1, b"\x00" * 40)
    bad_port = bytearray(good)
    bad_port[96:98] = (4792).to_bytes(2, "big")  # UDP destination port
    bad_ev = bytearray(good)
    bad_ev[15] ^= 0x01  # flow label bits 19:16 no longer match the UDP source port
    plain_udp = bytearray(good)
    plain_udp[20] = wire.IPPROTO_UDP  # an ordinary IPv6 packet, not MRC
    stranger = _frame(0, 1, b"\x00" * 40, inner_src=IPv6Address("fd00::99"))
    frames = {
        "rx_malformed": [good[:60], bytes(bad_port), bytes(bad_ev), good[:-5]],
        "rx_non_mrc": [bytes(plain_udp)],
        "rx_unknown_peer": [stranger],
    }
    before = bed.call(1, "stats")
    all_frames = [f.hex() for group in frames.values() for f in group]
    all_frames.append((b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb5" + b"junk" * 20).hex())  # other type
    all_frames.append(good.hex())  # well-framed, but 40 zero bytes are no MRC packet
    subprocess.run(["ip", "netns", "exec", bed.ns[0], sys.executable, "-c", INJECT,
                    FABRIC.nic(0, 0).ifname], input=json.dumps(all_frames), text=True,
                   check=True)

    def counted() -> bool:
        drv = bed.call(1, "stats")["driver"]["0"]
        return all(drv.get(k, 0) - before["driver"]["0"].get(k, 0) == len(v)
                   for k, v in frames.items())

    assert _wait_for(counted), bed.call(1, "stats")["driver"]
    after = bed.call(1, "stats")
    assert after["endpoint"]["malformed"] == before["endpoint"]["malformed"] + 1
    assert bed.procs[1].poll() is None
    assert transfer(bed, 100_000, seed=5)["verified"]


def _ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_idle_agents_use_almost_no_cpu(bed: VethBed) -> None:
    transfer(bed, 200_000, seed=3)
    _wait_for(lambda: all(set(counts) == {"GOOD"}  # let any probing finish first
                          for counts in bed.call(0, "stats")["ev_states"]["0x101"].values()))
    start = [_ticks(p.pid) for p in bed.procs]
    time.sleep(3.0)
    hz = os.sysconf("SC_CLK_TCK")
    used = [(_ticks(p.pid) - s) / hz for p, s in zip(bed.procs, start, strict=True)]
    print(f"\nidle CPU over 3 s: {used}")
    assert all(u < 0.15 for u in used), f"idle agents burnt {used} CPU s in 3 s: busy polling?"


def in_ns(tb: VethBed, host: int, *cmd: str) -> str:
    return sh("ip", "netns", "exec", tb.ns[host], *cmd).stdout


def test_kernel_is_kept_out_of_the_way(bed: VethBed) -> None:
    for p in range(PLANES):
        ifname = FABRIC.nic(1, p).ifname
        assert in_ns(bed, 1, "cat", f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6") == "1\n"
        offloads = in_ns(bed, 1, "ethtool", "-k", ifname)
        assert "generic-receive-offload: off" in offloads
        assert "tx-checksumming: off" in offloads


def test_cli_drives_the_agent(bed: VethBed) -> None:
    def run_cli(host: int, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "host_agent.cli", "--socket",
                               bed.sockets[host], *args], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    out = run_cli(0, "write", "1", "300000", "--seed", "11", "--peer-socket", bed.sockets[1])
    assert out.returncode == 0, out.stderr
    assert "receiver verified every byte" in out.stdout
    stats = json.loads(run_cli(0, "--json", "stats", "--per-ev").stdout)
    ev = int(next(iter(stats["per_ev"]["0x101"])))
    assert run_cli(0, "deny", "1", hex(ev)).returncode == 0
    per_ev = json.loads(run_cli(0, "--json", "stats", "--per-ev").stdout)["per_ev"]["0x101"]
    assert per_ev[str(ev)]["state"] == "DENIED"
    assert "receiver verified" in run_cli(0, "write", "1", "300000", "--peer-socket",
                                          bed.sockets[1]).stdout
    after = json.loads(run_cli(0, "--json", "stats", "--per-ev").stdout)["per_ev"]["0x101"]
    assert after[str(ev)]["tx_packets"] == per_ev[str(ev)]["tx_packets"]  # never used
    assert run_cli(0, "allow", "1", str(ev)).returncode == 0
    assert run_cli(0, "allow", "1", str(ev)).returncode == 1  # already GOOD: refused
    assert "plane" in run_cli(1, "stats").stdout


def test_shutdown_leaves_nothing_behind(tmp_path: Path) -> None:
    paths = tmp_path / "paths.json"
    paths.write_text(json.dumps(hostpaths.export(FABRIC)))
    tb = VethBed("s", (["--paths", str(paths)], ["--keep-ipv6"]))
    try:
        tb.start()
        assert transfer(tb, 50_000, seed=9)["verified"]
        conf = f"/proc/sys/net/ipv6/conf/{FABRIC.nic(1, 0).ifname}"
        assert in_ns(tb, 1, "cat", f"{conf}/disable_ipv6", f"{conf}/autoconf",
                     f"{conf}/accept_dad").split() == ["0", "0", "0"]
        assert tb.call(0, "shutdown") == {"ok": True, "host": 0}
        tb.procs[1].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=15) for p in tb.procs]
        assert codes == [0, 0]
        assert not any(Path(s).exists() for s in tb.sockets)
        for pid in (p.pid for p in tb.procs):
            assert not Path(f"/proc/{pid}").exists()
    finally:
        tb.close()
