"""Switch against switch: the same frames, entries and queue states through BMv2
(simple_switch_grpc running p4src/) and the software switch, outcome by outcome, nothing
excused.

    sudo .venv/bin/python -m tests.switch.differential [--count 2000] [--seed 1] [--json]
    sudo .venv/bin/python -m tests.switch.differential --seeds 1-5 --count 20000  # 100,000

tests/switch/difframes.py generates the frames: every kind a veth can deliver. Each target
runs as its own process on the same veth lab, programmed over P4Runtime with one switch's
entries (p0l0 of the golden corpus fabric). Before each frame every port's queue-depth
register is set (IDLE_DEPTH, or the probe's preset on one port). A frame's outcome is what
left, port and every byte, or the drop counter that moved (the reason), together with the
register afterwards: a data-priority frame leaving a port writes the depth it leaves
behind (0 here) over the preset, a high-priority one writes nothing, so equal registers
mean equal priorities. After the run every counter is read back, packets and bytes: over
P4Runtime from both, and over Thrift from BMv2 as well; the register over P4Runtime from
the software switch and over Thrift from BMv2 (whose P4Runtime does not read registers).
A queue-state sequence holds a port's data queue behind a 1 packet/s pacer and checks what
overtakes it, what gets trimmed and the order the held frames drain in.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient

import wire as W
from controller import p4build
from nodes.bmv2_switch import LOG_LEVEL
from p4rt import corpus
from p4rt import names as N
from p4rt.corpus import case_updates
from p4rt.p4info import load_committed
from rigs.vethlab import PACKET_OUTGOING, VethLab
from safety.procs import stop_process
from softswitch.cli import request
from tests.golden import generate as G
from tests.switch.difframes import PORTS, SWITCH, Probe, generate
from tests.switch.frame_support import flow_frame, sack_frame, trimmed_header
from tests.switch.p4rt_support import CODEC, IDX, free_port, register_update, wait_listening

REPO = Path(__file__).resolve().parents[2]
DEVICE_ID = 3
UPLINK, HOST_PORT = G.FABRIC.uplink_port(0), G.FABRIC.host_port(0)
IDLE_DEPTH = 1  # every port's register before a frame: below both thresholds, and not 0
COUNTERS = (N.DROP_COUNTER, N.TRIM_COUNTER, N.ECN_MARK_COUNTER)
UNLIMITED_PPS = 1_000_000  # far above what the lab can send, the same on both targets
HELD_PPS = 1  # the held data queue: one departure per second
OUTPUT_WAIT_S, LOST_AFTER_S = 0.004, 1.5


@dataclass(frozen=True)
class Setup:
    """What a corpus runner installs: p0l0's entries, no register presets."""

    entities: tuple
    register_cells: tuple = ()


def setup() -> Setup:
    return Setup(corpus.parse_entities(G.switch_entries(SWITCH), SWITCH.name))


# ---- the targets --------------------------------------------------------------------------

class LiveTarget:
    """One switch process on the lab's ports, programmed with p0l0's entries."""

    name = ""

    def __init__(self, lab: VethLab) -> None:
        self.lab = lab
        self.grpc_port, self.control_port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None
        self.client: P4RuntimeClient | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def device_config(self) -> bytes:
        return b""

    def set_queue_rate(self, pps: int, port: int, priority: int | None) -> None:
        """None: every priority queue of the port, as BMv2's set_queue_rate without one."""
        raise NotImplementedError

    def set_queue_depth(self, packets: int, port: int) -> None:
        raise NotImplementedError

    def __enter__(self) -> LiveTarget:
        ports = [arg for p, ifname in self.lab.ports.items() for arg in ("-i", f"{p}@{ifname}")]
        self.proc = subprocess.Popen(self.command() + ports + self.target_args(), cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_listening(self.grpc_port, self.proc)
            self.client = P4RuntimeClient(DEVICE_ID, f"127.0.0.1:{self.grpc_port}", (0, 1))
            req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
                device_id=DEVICE_ID, election_id=p4runtime_pb2.Uint128(low=1),
                action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
            req.config.p4info.CopyFrom(load_committed())
            req.config.p4_device_config = self.device_config()
            self.client.stub.SetForwardingPipelineConfig(req)
            self.write(case_updates(CODEC, setup()))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def target_args(self) -> list[str]:
        return []

    def close(self) -> None:
        if self.client is not None:
            self.client.tear_down()
            self.client = None
        if self.proc is not None:
            stop_process(self.proc, 10)
            self.proc = None

    def write(self, updates: list[p4runtime_pb2.Update]) -> None:
        assert self.client is not None
        req = p4runtime_pb2.WriteRequest()
        req.updates.extend(updates)
        self.client.write(req)

    def set_depth(self, port: int, depth: int) -> None:
        self.write([register_update(N.QUEUE_DEPTH_REGISTER, port, depth)])

    def set_depths(self, depths: dict[int, int]) -> None:
        self.write([register_update(N.QUEUE_DEPTH_REGISTER, p, d)
                    for p, d in depths.items()])

    def counter(self, name: str) -> list[tuple[int, int]]:
        """Every cell of an indexed counter over P4Runtime: (packets, bytes)."""
        assert self.client is not None
        entity = p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(
            counter_id=IDX.id_of(name)))
        cells = {e.counter_entry.index.index: (e.counter_entry.data.packet_count,
                                               e.counter_entry.data.byte_count)
                 for r in self.client.read_one(entity) for e in r.entities}
        return [cells.get(i, (0, 0)) for i in range(max(cells, default=-1) + 1)]

    def direct_counters(self) -> dict[str, tuple[int, int]]:
        """Every table entry's direct counter over P4Runtime: (packets, bytes), keyed by
        table and match."""
        assert self.client is not None
        out = {}
        for table in N.DIRECT_COUNTERS.values():
            entity = p4runtime_pb2.Entity(direct_counter_entry=p4runtime_pb2.DirectCounterEntry(
                table_entry=p4runtime_pb2.TableEntry(table_id=IDX.id_of(table))))
            for r in self.client.read_one(entity):
                for e in r.entities:
                    d = e.direct_counter_entry
                    key = f"{table} {d.table_entry.match}".replace("\n", " ")
                    out[key] = (d.data.packet_count, d.data.byte_count)
        return out

    def register_p4rt(self, name: str, index: int | None = None) -> list[int]:
        """A register's cells (or the one at `index`) over P4Runtime."""
        assert self.client is not None
        entry = p4runtime_pb2.RegisterEntry(register_id=IDX.id_of(name))
        if index is not None:
            entry.index.index = index
        cells = {e.register_entry.index.index: int.from_bytes(
            e.register_entry.data.bitstring, "big")
            for r in self.client.read_one(p4runtime_pb2.Entity(register_entry=entry))
            for e in r.entities}
        if index is not None:
            return [cells[index]]
        return [cells.get(i, 0) for i in range(max(cells, default=-1) + 1)]

    def depths(self) -> list[int]:
        """The ports' queue-depth register cells, after a frame (its priority shows here)."""
        return [self.register_p4rt(N.QUEUE_DEPTH_REGISTER, p)[0] for p in PORTS]

    def register(self, name: str) -> list[int]:
        """A register's cells, over P4Runtime (BMv2 reads them over Thrift)."""
        return self.register_p4rt(name)

    def readback(self) -> dict:
        """What the run left, read back: indexed and direct counters, the register."""
        return {"counters": {name: self.counter(name) for name in COUNTERS},
                "direct": self.direct_counters(),
                "register": self.register(N.QUEUE_DEPTH_REGISTER)}


class SoftTarget(LiveTarget):
    name = "soft"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "softswitch", "--device-id", str(DEVICE_ID),
                "--grpc-server-addr", f"127.0.0.1:{self.grpc_port}", "--thrift-port",
                str(self.control_port), "--priority-queues", str(N.PRIORITY_QUEUES),
                "--no-p4", "--log-level", "warn"]

    def set_queue_rate(self, pps: int, port: int, priority: int | None) -> None:
        req = {"cmd": "set_queue_rate", "rate": float(pps), "port": port}
        request(self.control_port, req if priority is None else {**req, "priority": priority})

    def set_queue_depth(self, packets: int, port: int) -> None:
        request(self.control_port, {"cmd": "set_queue_depth", "depth": packets, "port": port})


class Bmv2Target(LiveTarget):
    """BMv2's PI refuses P4Runtime register writes ("not supported yet"), and a runtime
    CLI process per preset would cost 0.3 s: talk Thrift in-process, through BMv2's own
    runtime modules (on the path of the project venv after install.sh)."""

    name = "bmv2"

    def command(self) -> list[str]:
        return ["simple_switch_grpc", "--device-id", str(DEVICE_ID), "--no-p4",
                "--thrift-port", str(self.control_port), "--log-level", LOG_LEVEL]

    def target_args(self) -> list[str]:
        return ["--", "--grpc-server-addr", f"127.0.0.1:{self.grpc_port}",
                "--priority-queues", str(N.PRIORITY_QUEUES)]

    def device_config(self) -> bytes:
        return p4build.ensure_compiled()[0].read_bytes()

    def _thrift(self):
        if not hasattr(self, "_clients"):
            import runtime_CLI
            from sswitch_runtime import SimpleSwitch

            services = [("standard", runtime_CLI.Standard.Client),
                        ("simple_switch", SimpleSwitch.Client)]
            self._clients = runtime_CLI.thrift_connect("127.0.0.1", self.control_port, services)
        return self._clients

    def set_depth(self, port: int, depth: int) -> None:
        self._thrift()[0].bm_register_write(0, N.QUEUE_DEPTH_REGISTER, port, depth)

    def set_depths(self, depths: dict[int, int]) -> None:
        for port, depth in depths.items():
            self.set_depth(port, depth)

    def set_queue_rate(self, pps: int, port: int, priority: int | None) -> None:
        if priority is None:
            self._thrift()[1].set_egress_queue_rate(port, pps)
        else:
            self._thrift()[1].set_egress_priority_queue_rate(port, priority, pps)

    def set_queue_depth(self, packets: int, port: int) -> None:
        self._thrift()[1].set_egress_queue_depth(port, packets)

    def register(self, name: str) -> list[int]:
        """Over Thrift: BMv2 1.15.1's P4Runtime answers register reads UNIMPLEMENTED
        ("Register reads are not supported yet")."""
        return list(self._thrift()[0].bm_register_read_all(0, name))

    def depths(self) -> list[int]:
        cells = self.register(N.QUEUE_DEPTH_REGISTER)
        return [cells[p] for p in PORTS]

    def readback(self) -> dict:
        """P4Runtime's reading of the counters, and Thrift's: both interfaces of BMv2 must
        say the same (thrift_differs)."""
        out = super().readback()
        standard = self._thrift()[0]
        thrift = {name: [(v.packets, v.bytes) for v in (
            standard.bm_counter_read(0, name, i) for i in range(len(out["counters"][name])))]
            for name in COUNTERS}
        out["thrift_differs"] = {
            name: [thrift[name], out["counters"][name]] for name in COUNTERS
            if thrift[name] != out["counters"][name]}
        return out




# ---- running frames through a target ------------------------------------------------------

class Wire:
    """Raw sockets on the host end of every lab port."""

    def __init__(self, lab: VethLab) -> None:
        self.lab = lab
        self.socks = {p: lab.host_socket(p) for p in PORTS}
        self.by_fd = {s.fileno(): (p, s) for p, s in self.socks.items()}

    def close(self) -> None:
        for s in self.socks.values():
            s.close()

    def send(self, port: int, frame: bytes) -> None:
        self.socks[port].send(frame)

    def receive(self, timeout: float) -> list[tuple[int, str]]:
        """Frames that left the switch within `timeout` (our own sends are skipped)."""
        got: list[tuple[int, str]] = []
        ready, _, _ = select.select(list(self.by_fd), [], [], timeout)
        for fd in ready:
            port, sock = self.by_fd[fd]
            while True:
                try:
                    frame, addr = sock.recvfrom(65535, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                if addr[2] != PACKET_OUTGOING:
                    got.append((port, frame.hex()))
        return got

    def until_quiet(self, quiet: float) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        while batch := self.receive(quiet):
            out += batch
        return out


def exchange(target: LiveTarget, wire: Wire, port: int, frame: bytes) -> tuple:
    """("out", [(port, hex)]), ("drop", reasons) or ("lost",): what one frame became."""
    before = target.counter(N.DROP_COUNTER)
    wire.send(port, frame)
    deadline = time.monotonic() + LOST_AFTER_S
    while True:
        got = wire.receive(OUTPUT_WAIT_S)
        if got:
            return ("out", sorted(got + wire.receive(OUTPUT_WAIT_S)))
        after = target.counter(N.DROP_COUNTER)
        moved = [name for name, i in N.DROP_REASONS.items()
                 if (after[i] if i < len(after) else 0) != (before[i] if i < len(before) else 0)]
        if moved:
            return ("drop", moved)
        if time.monotonic() > deadline:
            return ("lost",)


def held_queue(target: LiveTarget, wire: Wire, seed: int) -> list:
    """The uplink's data queue held behind a 1 packet/s pacer, the depth register above the
    trim threshold: SACKs and trimmed headers overtake it, data is trimmed, an untrimmable
    data frame joins it CE-marked, the held frames drain in order, and the last one out
    leaves a depth that no longer trims. A SACK after frames that only queue proves they
    passed ingress (ingress is FIFO) before the register is preset."""
    rng = random.Random(seed)
    steps: list = []
    target.set_queue_rate(HELD_PPS, UPLINK, N.PRIORITY_DATA)
    time.sleep(1.0 / HELD_PPS + 0.1)  # no departure credit left from earlier traffic
    steps.append(exchange(target, wire, HOST_PORT, flow_frame(W.DSCP_TRIMMABLE, rng)))  # leaves
    for _ in range(3):
        wire.send(HOST_PORT, flow_frame(W.DSCP_TRIMMABLE, rng))  # held: one per second
    steps.append(exchange(target, wire, HOST_PORT, sack_frame(rng)))
    target.set_depth(UPLINK, G.TRIM_DEPTH)
    steps.append(exchange(target, wire, HOST_PORT, flow_frame(W.DSCP_TRIMMABLE_RETX, rng)))
    steps.append(exchange(target, wire, HOST_PORT, trimmed_header(rng)))
    wire.send(HOST_PORT, flow_frame(W.DSCP_NO_TRIM, rng))  # held too, CE-marked
    steps.append(exchange(target, wire, HOST_PORT, sack_frame(rng)))
    target.set_queue_rate(UNLIMITED_PPS, UPLINK, N.PRIORITY_DATA)  # not for queued packets
    steps.append(("drained", wire.until_quiet(1.0 / HELD_PPS + 0.5)))
    steps.append(exchange(target, wire, HOST_PORT, flow_frame(W.DSCP_TRIMMABLE, rng)))
    return steps


@dataclass
class Run:
    outcomes: list
    held: list
    readback: dict
    seconds: float


def run_target(cls: type[LiveTarget], lab: VethLab, probes: list[Probe], seed: int) -> Run:
    start = time.monotonic()
    with cls(lab) as target:
        for port in PORTS:
            target.set_queue_rate(UNLIMITED_PPS, port, N.PRIORITY_DATA)
            target.set_queue_rate(UNLIMITED_PPS, port, N.PRIORITY_HIGH)
        wire = Wire(lab)
        try:
            wire.until_quiet(0.05)
            outcomes = []
            for probe in probes:
                # Every frame starts from the same register state on both targets.
                depths = dict.fromkeys(PORTS, IDLE_DEPTH)
                if probe.preset is not None:
                    depths[probe.preset[0]] = probe.preset[1]
                target.set_depths(depths)
                outcome = exchange(target, wire, probe.port, probe.frame)
                outcomes.append((*outcome, target.depths()))
            readback = target.readback()
            held = held_queue(target, wire, seed)
        finally:
            wire.close()
    return Run(outcomes, held, readback, time.monotonic() - start)


def compare(probes: list[Probe], soft: Run, bmv2: Run) -> list[dict]:
    """Every disagreement, with what a developer needs to reproduce it."""
    out = []
    for i, (probe, a, b) in enumerate(zip(probes, soft.outcomes, bmv2.outcomes, strict=True)):
        if a != b:
            out.append({"index": i, "category": probe.category, "port": probe.port,
                        "preset": probe.preset, "frame": probe.frame.hex(), "soft": a,
                        "bmv2": b})
    if soft.held != bmv2.held:
        out.append({"index": "held_queue", "soft": soft.held, "bmv2": bmv2.held})
    for name, cells in bmv2.readback["counters"].items():
        width = max(len(cells), len(soft.readback["counters"][name]))
        a = soft.readback["counters"][name] + [(0, 0)] * (width - len(
            soft.readback["counters"][name]))
        b = cells + [(0, 0)] * (width - len(cells))
        if a != b:
            out.append({"index": f"counter {name}",
                        "soft": {i: v for i, v in enumerate(a) if v != (0, 0)},
                        "bmv2": {i: v for i, v in enumerate(b) if v != (0, 0)}})
    for what in ("direct", "register"):
        if soft.readback[what] != bmv2.readback[what]:
            out.append({"index": what, "soft": soft.readback[what],
                        "bmv2": bmv2.readback[what]})
    if bmv2.readback["thrift_differs"]:
        out.append({"index": "bmv2 thrift against p4runtime",
                    "bmv2": bmv2.readback["thrift_differs"]})
    return out


def differential(seed: int, count: int) -> dict:
    """Run both targets on one lab; the report the test and the CLI print."""
    probes = generate(seed, count)
    with VethLab(f"df{os.getpid() % 100000}", len(PORTS)) as lab:
        soft = run_target(SoftTarget, lab, probes, seed)
        bmv2 = run_target(Bmv2Target, lab, probes, seed)
    kinds = Counter(o[0] for o in bmv2.outcomes)
    return {"seed": seed, "frames": count, "categories": dict(Counter(p.category for p in probes)),
            "outcomes": dict(kinds), "seconds": {"soft": soft.seconds, "bmv2": bmv2.seconds},
            "lost": {"soft": sum(o[0] == "lost" for o in soft.outcomes),
                     "bmv2": sum(o[0] == "lost" for o in bmv2.outcomes)},
            "priorities_seen": priorities_seen(bmv2.outcomes),
            "readback": {"soft": soft.readback, "bmv2": bmv2.readback},
            "held_queue": bmv2.held, "disagreements": compare(probes, soft, bmv2)}


def priorities_seen(outcomes: list) -> dict[str, int]:
    """Forwarded frames whose priority the register shows: a data-priority departure wrote
    0 over IDLE_DEPTH or the preset; high priority left it (a preset of 0 hides it)."""
    seen: Counter[str] = Counter()
    for outcome in outcomes:
        if outcome[0] == "out" and len(outcome[1]) == 1:
            depth = outcome[2][PORTS.index(outcome[1][0][0])]
            seen["data" if depth == 0 else "high"] += 1
    return dict(seen)


def _seeds(text: str) -> list[int]:
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: give a seed (3) or a range (1-5)")
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    if last < first:
        raise argparse.ArgumentTypeError(f"{text!r}: the range is empty")
    return list(range(first, last + 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.switch.differential", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=2000,
                   help="generated frames per seed (default 2000)")
    p.add_argument("--seeds", type=_seeds, default=[1], help="a seed or a range: 1-5")
    p.add_argument("--json", action="store_true", help="print every report as JSON")
    args = p.parse_args(argv)
    if args.count < 1:
        p.error("--count must be at least 1")
    total, disagreements = Counter(), 0
    for seed in args.seeds:
        report = differential(seed, args.count)
        disagreements += len(report["disagreements"])
        total.update(frames=args.count, soft_s=report["seconds"]["soft"],
                     bmv2_s=report["seconds"]["bmv2"])
        if args.json:
            print(json.dumps(report, default=str))
            continue
        print(f"seed {seed}: {args.count} frames {report['categories']}")
        print(f"  outcomes {report['outcomes']}, lost {report['lost']}, priorities "
              f"{report['priorities_seen']}, seconds "
              f"{ {k: round(v, 1) for k, v in report['seconds'].items()} }")
        for d in report["disagreements"]:
            print(f"  DISAGREE {d}")
    print(f"{total['frames']} frames over seeds {args.seeds[0]}-{args.seeds[-1]}: "
          f"{disagreements} disagreement(s); frames/s soft "
          f"{total['frames'] / total['soft_s']:.0f}, bmv2 {total['frames'] / total['bmv2_s']:.0f}",
          file=sys.stderr if args.json else sys.stdout)
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
