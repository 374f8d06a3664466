"""Software switch cost: CPU ms of one switch process per 1,000 forwarded MRC data frames.

    sudo .venv/bin/python -m bench.costs.switch_speed [--frames 10000] [--rate 2000] [--limit 4000]
                                                [--repeat 5] [--vs COMMIT] [--json [FILE]]

One `python -m softswitch` process on two veths (bench.costs.forwarding's programming: a T0 that
shifts the uSID and forwards to port 2, no trimming) gets `--frames` 1500-byte MRC data
frames into port 1, paced at `--rate` frames/s, below the port rate limit `--limit`
(set_queue_rate on every port, as the fabric does), so the egress queue stays short as in
the emulated fabric. The figure is the switch's CPU time (its threads' schedstat, in ns)
from just before the first measured frame until the last one arrived at port 2, per 1,000 delivered
frames; a warm-up of 200 frames comes first. With `--vs COMMIT` that commit's code runs
too, from a temporary git worktree (removed afterwards, also on Ctrl-C or SIGTERM), old and
new alternating `--repeat` times; the summary gives medians and new/old. Not a test: the
figures depend on the machine and its load (on 2 noisy cores compare medians of
--repeat >= 5).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from p4runtime_sh.p4runtime import P4RuntimeClient

from bench.costs.agent_speed import on_cpu_seconds
from bench.costs.forwarding import DEVICE_ID, FRAME_LEN, mrc_frame, program
from fabric.options import PACKET_RATE_UNIT, add_json_arg, add_rate_arg, write_json
from p4rt import names as N
from rigs.vethlab import PACKET_OUTGOING, VethLab
from safety.procs import stop_process
from safety.runstate import terminate_as_interrupt
from softswitch.cli import request

REPO = Path(__file__).resolve().parents[2]
WARMUP = 200
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process (all its threads), seconds, in clock ticks (10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver(threading.Thread):
    """Counts the forwarded frames arriving on a host socket until stopped."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock, self.count, self.stopping = sock, 0, False

    def run(self) -> None:
        buf = bytearray(2048)
        self.sock.settimeout(0.1)
        while not self.stopping:
            try:
                n, addr = self.sock.recvfrom_into(buf)
            except TimeoutError:
                continue
            if n == FRAME_LEN and addr[2] != PACKET_OUTGOING:
                self.count += 1

    def wait_for(self, count: int, idle: float = 1.0) -> None:
        """Return once `count` frames arrived, or nothing arrived for `idle` seconds."""
        last, seen = time.monotonic(), self.count
        while self.count < count and time.monotonic() - last < idle:
            time.sleep(0.01)
            if self.count != seen:
                last, seen = time.monotonic(), self.count


def send_paced(sock: socket.socket, frame: bytes, count: int, rate: float, burst: int) -> int:
    """Send `count` copies at `rate`/s, `burst` back to back at a time; returns how many the
    kernel refused (ENOBUFS). A sender that fell behind (descheduled) does not catch up
    with a burst: it starts afresh, so the offered rate stays at or below `rate`."""
    refused, due = 0, time.monotonic()
    for first in range(0, count, burst):
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -0.005:
            due = time.monotonic()
        for _ in range(min(burst, count - first)):
            try:
                sock.send(frame)
            except OSError:
                refused += 1
        due += burst / rate
    return refused


def run_once(code: Path, lab: VethLab, frames: int, rate: float, limit: float,
             burst: int = 1) -> dict:
    """One switch process running the code in `code`; the figures of one measurement."""
    grpc_port, control_port = _free_port(), _free_port()
    cmd = [sys.executable, "-m", "softswitch", "--device-id", str(DEVICE_ID),
           "--grpc-server-addr", f"127.0.0.1:{grpc_port}", "--thrift-port", str(control_port),
           "--no-p4", "--priority-queues", str(N.PRIORITY_QUEUES), "--log-level", "warn"]
    for port, ifname in lab.ports.items():
        cmd += ["-i", f"{port}@{ifname}"]
    # cwd first on sys.path: `-m softswitch` imports the code under test
    proc = subprocess.Popen(cmd, cwd=code, stdout=subprocess.DEVNULL)
    client = None
    socks: list[socket.socket] = []
    receiver = None
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"switch ({code}) exited with {proc.returncode}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", grpc_port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("switch: no gRPC after 30 s")
            time.sleep(0.1)
        client = P4RuntimeClient(DEVICE_ID, f"127.0.0.1:{grpc_port}", (0, 1))
        program(client, b"")
        request(control_port, {"cmd": "set_queue_rate", "rate": limit})
        tx, rx = lab.host_socket(1), lab.host_socket(2)
        socks += [tx, rx]
        receiver = Receiver(rx)
        receiver.start()
        frame = mrc_frame()
        send_paced(tx, frame, WARMUP, rate, burst)
        receiver.wait_for(WARMUP)
        base = receiver.count
        (user0, sys0), on0, t0 = cpu_seconds(proc.pid), on_cpu_seconds(proc.pid), time.monotonic()
        refused = send_paced(tx, frame, frames, rate, burst)
        receiver.wait_for(base + frames)
        (user1, sys1), wall = cpu_seconds(proc.pid), time.monotonic() - t0
        user, system = user1 - user0, sys1 - sys0
        cpu = on_cpu_seconds(proc.pid) - on0
        delivered = receiver.count - base
        stats = request(control_port, {"cmd": "stats"})["stats"]
        return {"frames": frames, "delivered": delivered, "wall_s": round(wall, 2),
                "offered_pps": round(frames / wall), "switch_cpu_s": round(cpu, 3),
                "user_s": round(user, 3), "sys_s": round(system, 3),
                "cpu_ms_per_1000": round(cpu * 1e6 / delivered, 1) if delivered else None,
                "send_refused": refused, "switch_rx": stats["rx"], "switch_tx": stats["tx"],
                "tail_drops": stats["tail_drop"], "kernel_drops": stats["rx_kernel_drops"]}
    finally:
        if receiver is not None:
            receiver.stopping = True
            receiver.join()
        for s in socks:
            s.close()
        if client is not None:
            client.tear_down()
        stop_process(proc, 10)


def summarise(runs: dict[str, list[dict]], old: str | None, new: str) -> dict:
    """Median/min/max CPU ms per 1,000 frames per label, and new/old of the medians."""
    out: dict = {}
    for label, rows in runs.items():
        values = sorted(r["cpu_ms_per_1000"] for r in rows if r["cpu_ms_per_1000"] is not None)
        if values:
            out[label] = {"median": statistics.median(values), "min": values[0],
                          "max": values[-1], "delivered": sum(r["delivered"] for r in rows),
                          "frames": sum(r["frames"] for r in rows)}
    if old and old in out and new in out and out[old]["median"]:
        out["new_over_old"] = round(out[new]["median"] / out[old]["median"], 2)
    return out


def format_summary(report: dict) -> str:
    a = report["args"]
    lines = [f"switch CPU per 1,000 forwarded {FRAME_LEN}-byte MRC frames (uSID shift): "
             f"{a['frames']:,} frames at {a['rate']:,.0f}/s offered (bursts of {a['burst']}), "
             f"port limit {a['limit']:,.0f}/s, {a['repeat']} run(s) each, {os.cpu_count()} CPUs, "
             f"load {report['load_before']} -> {report['load_after']}"]
    for label in report["labels"]:
        s = report["summary"].get(label)
        if s:
            lines.append(f"  {label:>14}: {s['median']:.1f} ms (min {s['min']:.1f}, max "
                         f"{s['max']:.1f}), delivered {s['delivered']:,}/{s['frames']:,}")
    if "new_over_old" in report["summary"]:
        lines.append(f"  new / old: {report['summary']['new_over_old']}")
    return "\n".join(lines)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.costs.switch_speed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=10000,
                   help="frames sent per run (default %(default)s)")
    add_rate_arg(p, "offered: the frames sent into port 1 (default %(default)g)", 2000.0,
                 minimum=0, kind=float)
    p.add_argument("--limit", type=float, default=4000.0,
                   help=f"{PACKET_RATE_UNIT}: every port's rate limit (default %(default)g)")
    p.add_argument("--burst", type=int, default=1,
                   help="frames sent back to back each time (the average rate stays --rate)")
    p.add_argument("--repeat", type=int, default=5,
                   help="runs; the figures are their medians (default %(default)s)")
    p.add_argument("--vs", metavar="COMMIT", help="also measure this commit's switch code")
    add_json_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.costs.switch_speed needs root (namespaces, raw sockets)", file=sys.stderr)
        return 2
    if min(args.frames, args.repeat) < 1 or not 1 <= args.burst <= 64 or not (
            0 < args.rate < args.limit):
        p.error("need --frames, --repeat >= 1, --burst 1..64 (the queue depth) and "
                "0 < --rate < --limit")
    terminate_as_interrupt()  # run the finally blocks: worktree, switch, veths
    new = _git("rev-parse", "--short", "HEAD") + ("+dirty" if _git("status", "--porcelain",
                                                                  "--untracked-files=no") else "")
    codes = {new: REPO}
    old = None
    with tempfile.TemporaryDirectory(prefix="switch-speed-") as tmp:
        worktree = Path(tmp) / "old"
        try:
            if args.vs:
                old = _git("rev-parse", "--short", args.vs)
                old += " (vs)" if old == new else ""
                _git("worktree", "add", "--detach", str(worktree), args.vs)
                codes = {old: worktree, new: REPO}
            runs: dict[str, list[dict]] = {label: [] for label in codes}
            load_before = round(os.getloadavg()[0], 2)
            with VethLab(f"sws{os.getpid() % 10000}", 2) as lab:
                for _ in range(args.repeat):
                    for label, code in codes.items():
                        runs[label].append(run_once(code, lab, args.frames, args.rate,
                                                    args.limit, args.burst))
        finally:
            if worktree.exists():
                _git("worktree", "remove", "--force", str(worktree))
    report = {"args": vars(args), "labels": list(codes), "old": old, "new": new,
              "load_before": load_before, "load_after": round(os.getloadavg()[0], 2),
              "runs": runs, "summary": summarise(runs, old, new)}
    print(format_summary(report))
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench.costs.switch_speed: interrupted (switch, veths and worktree removed)",
              file=sys.stderr)
        sys.exit(130)
