"""Forwarding benchmark: packets/s of 1500-byte MRC data frames through one switch process.

    sudo .venv/bin/python -m bench.costs.forwarding [--seconds 5] [--repeat 3]
                                              [--target auto|bmv2|soft|both] [--json [FILE]]

A sender in namespace h1 blasts one uSID-routed MRC data frame as fast as it can into
switch port 1; the switch (programmed over P4Runtime like a T0: shift, forward to port
2, no trimming) sends it to namespace h2, where a receiver counts delivered frames. The
rate is taken between the first and last delivered frame. Also reported: the switch
process's CPU use during the run, CPU time per delivered packet, kpps_per_core (thousands
of delivered frames per CPU-second of the switch process, 1000 / cpu_us_per_packet: what
one core would forward for the switch alone, however much of a shared machine the sender
takes, so less noisy than delivered_pps), and its VmRSS. With BMv2 installed
(fabric.options.bmv2_installed; `both`, the default) the targets run alternately, `--repeat`
times each, side by side in one run; the summary gives each figure's median, min and max and the
soft/BMv2 ratios of the medians. BMv2 runs the compiled p4src/ (compiled on demand) at the
fabric's log level. Not a test: figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient

import wire as W
from controller.p4build import ensure_compiled
from fabric.options import (
    BMV2_TOOLS,
    add_json_arg,
    add_target_arg,
    bmv2_installed,
    json_to_stdout,
    resolve_target,
    write_json,
)
from fabric.topology import Fabric, usid_prefix
from nodes.bmv2_switch import LOG_LEVEL
from p4rt import names as N
from p4rt import program as P
from p4rt.codec import Codec
from p4rt.p4info import COMMITTED_P4INFO
from p4rt.p4info import load_text as load_p4info
from rigs.vethlab import PACKET_OUTGOING, VethLab
from safety.procs import stop_process

REPO = Path(__file__).resolve().parents[2]
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
    codec = Codec.committed()
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
    write.updates.extend(codec.inserts(P.usid_entries(
        usid_prefix(t0.usid), {usid_prefix(spine.usid): (2, 0x020000000200)}) + [
        P.port_config(2, host_facing=False, ecn_enabled=False, trim_threshold=NO_TRIM,
                      ecn_threshold=NO_TRIM, smac=0x020000000100)]))
    client.write(write)


def switch_command(target: str, ports: dict[int, str], grpc_port: int) -> list[str]:
    if target == "soft":
        cmd = [sys.executable, "-m", "softswitch", "--device-id", str(DEVICE_ID),
               "--grpc-server-addr", f"127.0.0.1:{grpc_port}", "--no-p4",
               "--priority-queues", str(N.PRIORITY_QUEUES), "--log-level", "warn"]
    else:
        cmd = ["simple_switch_grpc", "--device-id", str(DEVICE_ID), "--log-level", LOG_LEVEL,
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
           "bench.costs.forwarding", "--role", role, "--seconds", str(seconds)]
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
        program(client, ensure_compiled()[0].read_bytes() if target == "bmv2" else b"")
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
        cpu_per_packet = cpu / got["pps"] if got["pps"] else None
        return {"target": target, "sent_pps": round(sent["pps"]), "sent": sent["count"],
                "delivered": got["count"], "lost": max(0, sent["count"] - got["count"]),
                "delivered_pps": round(got["pps"]), "switch_cpu_cores": round(cpu, 2),
                "cpu_us_per_packet": round(cpu_per_packet * 1e6, 1) if cpu_per_packet else None,
                "kpps_per_core": round(1e-3 / cpu_per_packet, 1) if cpu_per_packet else None,
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


FIGURES = ("delivered_pps", "cpu_us_per_packet", "kpps_per_core", "rss_mb_busy", "sent_pps",
           "lost")


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Median, min and max of each figure per target, and soft/BMv2 ratios of the medians."""
    out: dict = {}
    for target, rows in runs.items():
        out[target] = {}
        for key in FIGURES:
            values = sorted(r[key] for r in rows if r.get(key) is not None)
            if values:
                out[target][key] = {"median": statistics.median(values), "min": values[0],
                                    "max": values[-1]}
    if "soft" in out and "bmv2" in out:
        ratios = {}
        for key in ("delivered_pps", "cpu_us_per_packet", "rss_mb_busy"):
            a, b = out["soft"].get(key), out["bmv2"].get(key)
            if a and b and b["median"]:
                ratios[key] = round(a["median"] / b["median"], 2)
        out["soft_over_bmv2"] = ratios
    return out


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


def format_summary(report: dict) -> str:
    lines = [f"{report['frame_bytes']}-byte MRC data frames through one switch, "
             f"{report['seconds']} s x {report['repeat']} per target, {report['cpus']} CPUs, "
             f"load average before/after {report['load_before']} / {report['load_after']}"]
    for target in ("soft", "bmv2"):
        fig = report["summary"].get(target)
        if not fig:
            continue
        parts = [f"{k} {_num(v['median'])} ({_num(v['min'])}..{_num(v['max'])})"
                 for k, v in fig.items()]
        lines.append(f"  {target:5s} " + ", ".join(parts))
    if report["summary"].get("soft_over_bmv2"):
        lines.append("  soft / bmv2 (medians): " + ", ".join(
            f"{k} {v}" for k, v in report["summary"]["soft_over_bmv2"].items()))
    lines += [f"  note: {k}: {v}" for k, v in report["notes"].items()]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.costs.forwarding", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0,
                   help="seconds each run forwards frames (default %(default)g)")
    add_target_arg(p, default="both", more={"both": "soft and, where installed, bmv2"})
    p.add_argument("--repeat", type=int, default=3, help="runs per target, alternating")
    add_json_arg(p)
    p.add_argument("--role", choices=("sender", "receiver"), help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.role:
        print(json.dumps((sender if args.role == "sender" else receiver)(args.seconds)))
        return 0
    if os.geteuid() != 0:
        print("bench.costs.forwarding needs root (namespaces, raw sockets)", file=sys.stderr)
        return 2
    if args.repeat < 1 or args.seconds <= 0:
        p.error("--repeat must be >= 1 and --seconds > 0")
    wanted = "both" if args.target == "both" else resolve_target(args.target)
    targets = ["soft"] if wanted in ("soft", "both") else []
    notes = {}
    if wanted in ("bmv2", "both"):
        if bmv2_installed():
            targets.append("bmv2")
        else:
            notes["bmv2"] = f"{' and '.join(BMV2_TOOLS)} not both on PATH: BMv2 not measured"
    runs: dict[str, list[dict]] = {t: [] for t in targets}
    load_before = round(os.getloadavg()[0], 2)
    with VethLab(f"fwb{os.getpid() % 10000}", 2) as lab:
        for _ in range(args.repeat):
            for target in targets:
                runs[target].append(run_target(target, lab, args.seconds))
    report: dict = {"frame_bytes": FRAME_LEN, "seconds": args.seconds, "repeat": args.repeat,
                    "cpus": os.cpu_count(), "load_before": load_before,
                    "load_after": round(os.getloadavg()[0], 2), "runs": runs,
                    "summary": summarise(runs), "notes": notes}
    if not json_to_stdout(args):
        print(format_summary(report))
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
