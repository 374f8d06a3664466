"""Forwarding benchmark: packets/s of 1500-byte MRC data frames through one switch process.

    sudo .venv/bin/python -m bench.forwarding [--seconds 5] [--target soft|bmv2|both]

A sender in namespace h1 blasts one uSID-routed MRC data frame as fast as it can into
switch port 1; the switch (programmed over P4Runtime like a T0: shift, forward to port
2, no trimming) sends it to namespace h2, where a receiver counts delivered frames. The
rate is taken between the first and last delivered frame. Also reported: the switch
process's CPU use during the run (so the rate can be read per core) and its VmRSS.
When simple_switch_grpc and p4src/build/mrc.json exist, BMv2 runs the same and the
ratio is reported. Prints one JSON object. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient

from controller import p4names as N
from controller.topology import Fabric, usid_prefix
from host_agent import wire as W
from softswitch.netlab import PACKET_OUTGOING, VethLab
from softswitch.p4info import COMMITTED_P4INFO
from softswitch.p4info import load_text as load_p4info
from softswitch.testing import committed_index, port_config, update, usid_entries
from topologies.procs import stop_process

REPO = Path(__file__).resolve().parent.parent
BMV2_JSON = REPO / "p4src" / "build" / "mrc.json"
FRAME_LEN = 1500
DEVICE_ID = 1
NO_TRIM = (1 << N.QDEPTH_BITS) - 1


def mrc_frame() -> bytes:
    """A 1500-byte WRITE_ONLY frame on a cross-spine path, as a host would send it."""
    fabric = Fabric()
    path = fabric.paths(0, fabric.hosts_per_t0, 0)[0]
    t0 = fabric.t0(0, 0)
    env = W.Envelope(path.src.mac, t0.mac, path.src.address, path.address, path.src.address,
                     path.dst.address, 0x1234, W.DSCP_TRIMMABLE, W.ECN_ECT0)
    size = FRAME_LEN - W.TRIMMED_FRAME_LEN
    pkt = W.DataPacket(W.Bth(W.OP_WRITE_ONLY, 0x100, 1), W.Meth(1), W.Reth(0, 1, size),
                       bytes(size))
    frame = W.encode_frame(env, W.encode_packet(pkt))
    assert len(frame) == FRAME_LEN
    return frame


def program(client: P4RuntimeClient, device_config: bytes) -> None:
    idx = committed_index()
    fabric = Fabric()
    t0, spine = fabric.t0(0, 0), fabric.t1(0, 0)
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID,
        action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    req.election_id.low = 1
    req.config.p4info.CopyFrom(load_p4info(COMMITTED_P4INFO))
    req.config.p4_device_config = device_config
    client.stub.SetForwardingPipelineConfig(req)
    write = p4runtime_pb2.WriteRequest()
    write.updates.extend(usid_entries(idx, usid_prefix(t0.usid),
                                      {usid_prefix(spine.usid): (2, 0x020000000200)}))
    write.updates.append(update("table_entry", port_config(idx, 2, False, False, NO_TRIM,
                                                           NO_TRIM, 0x020000000100)))
    client.write(write)


def switch_command(target: str, ports: dict[int, str], grpc_port: int) -> list[str]:
    if target == "soft":
        cmd = [sys.executable, "-m", "softswitch", "--device-id", str(DEVICE_ID),
               "--grpc-server-addr", f"127.0.0.1:{grpc_port}", "--no-p4",
               "--priority-queues", str(N.PRIORITY_QUEUES), "--log-level", "warn"]
    else:
        cmd = ["simple_switch_grpc", "--device-id", str(DEVICE_ID), "--log-level", "off",
               "--thrift-port", str(grpc_port + 1)]
    for port, ifname in ports.items():
        cmd += ["-i", f"{port}@{ifname}"]
    if target == "bmv2":
        cmd += ["--no-p4", "--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
                "--priority-queues", str(N.PRIORITY_QUEUES)]
    return cmd


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _helper(lab: VethLab, port: int, role: str, seconds: float) -> subprocess.Popen:
    cmd = ["ip", "netns", "exec", lab.namespaces[port], sys.executable, "-m",
           "bench.forwarding", "--role", role, "--seconds", str(seconds)]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)


def run_target(target: str, lab: VethLab, seconds: float) -> dict:
    grpc_port = _free_port()
    proc = subprocess.Popen(switch_command(target, lab.ports, grpc_port), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = None
    helpers: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{target} switch exited with {proc.returncode}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", grpc_port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target} switch: no gRPC after 30 s")
            time.sleep(0.1)
        client = P4RuntimeClient(DEVICE_ID, f"127.0.0.1:{grpc_port}", (0, 1))
        program(client, BMV2_JSON.read_bytes() if target == "bmv2" else b"")
        rss_idle = _rss_kb(proc.pid)
        receiver = _helper(lab, 2, "receiver", seconds + 3)
        helpers.append(receiver)
        time.sleep(0.5)
        cpu0, t0 = _cpu(proc.pid), time.monotonic()
        sender = _helper(lab, 1, "sender", seconds)
        helpers.append(sender)
        sent = json.loads(sender.communicate(timeout=seconds + 30)[0])
        cpu = (_cpu(proc.pid) - cpu0) / (time.monotonic() - t0)
        rss_busy = _rss_kb(proc.pid)
        got = json.loads(receiver.communicate(timeout=seconds + 30)[0])
        return {"target": target, "sent_pps": round(sent["pps"]), "delivered": got["count"],
                "delivered_pps": round(got["pps"]), "switch_cpu_cores": round(cpu, 2),
                "pps_per_core": round(got["pps"] / cpu) if cpu > 0 else None,
                "rss_mb_idle": round(rss_idle / 1024, 1), "rss_mb_busy": round(rss_busy / 1024, 1)}
    finally:
        for h in helpers:
            if h.poll() is None:
                h.kill()
                h.wait()
        if client is not None:
            client.tear_down()
        stop_process(proc, 10)


def sender(seconds: float) -> dict:
    frame = mrc_frame()
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind(("eth0", 0))
        send, count, end = s.send, 0, time.monotonic() + seconds
        start = time.monotonic()
        while time.monotonic() < end:
            for _ in range(256):
                try:
                    send(frame)
                    count += 1
                except OSError:  # ENOBUFS: the qdisc is full for a moment
                    break
        return {"count": count, "pps": count / (time.monotonic() - start)}


def receiver(seconds: float) -> dict:
    buf = bytearray(2048)
    first = last = 0.0
    count = 0
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind(("eth0", 0))
        s.settimeout(0.5)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                n, addr = s.recvfrom_into(buf)
            except TimeoutError:
                continue
            if n == FRAME_LEN and addr[2] != PACKET_OUTGOING:
                last = time.monotonic()
                first = first or last
                count += 1
    pps = (count - 1) / (last - first) if count > 1 and last > first else 0.0
    return {"count": count, "pps": pps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--target", choices=("soft", "bmv2", "both"), default="both")
    p.add_argument("--role", choices=("sender", "receiver"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role:
        print(json.dumps((sender if args.role == "sender" else receiver)(args.seconds)))
        return 0
    if os.geteuid() != 0:
        print("bench.forwarding needs root (namespaces, raw sockets)", file=sys.stderr)
        return 2
    targets = ["soft"]
    notes = {}
    if args.target in ("bmv2", "both"):
        if shutil.which("simple_switch_grpc") is None:
            notes["bmv2"] = "simple_switch_grpc not on PATH: BMv2 not measured"
        elif not BMV2_JSON.exists():
            notes["bmv2"] = f"{BMV2_JSON} missing: run p4src/build.sh"
        else:
            targets.append("bmv2")
        if args.target == "bmv2":
            targets.remove("soft")
    results = {}
    with VethLab(f"fwb{os.getpid() % 10000}", 2) as lab:
        for target in targets:
            results[target] = run_target(target, lab, args.seconds)
    report: dict = {"frame_bytes": FRAME_LEN, "seconds": args.seconds, "cpus": os.cpu_count(),
                    "results": results, "notes": notes}
    if "soft" in results and "bmv2" in results and results["bmv2"]["delivered_pps"]:
        report["soft_over_bmv2"] = round(
            results["soft"]["delivered_pps"] / results["bmv2"]["delivered_pps"], 2)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
