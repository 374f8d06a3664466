"""Switch against switch: the same frames, entries and queue states through BMv2
(simple_switch_grpc running p4src/) and the software switch, outcome by outcome.

    sudo .venv/bin/python -m tests.switch.differential [--count 2000] [--seed 1] [--json]

A seeded generator makes frames of every kind the fabric carries (MRC data of every opcode
and length, SACK/NACK/probe/port-status, already-trimmed headers, baseline TCP/UDP) and
mutations of them (truncations, wrong lengths and versions, hop limits 0/1/2, unknown or
exhausted uSIDs, foreign ethertypes, random bytes), with queue-depth register presets
around the trim and ECN thresholds. Each target runs as its own process on the same veth
lab, programmed over P4Runtime with one switch's entries (p0l0 of the golden corpus
fabric); each frame's outcome is the frame that left and its port, or the drop counter
that moved. A queue-state sequence holds a port's data queue behind a 1 packet/s pacer
and checks what overtakes it, what gets trimmed and the order the held frames drain in.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from ipaddress import IPv6Address
from pathlib import Path

from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient

import wire as W
from controller import p4build
from fabric.topology import shift_usid, usid_address
from p4rt import corpus
from p4rt import names as N
from p4rt.corpus import case_updates
from p4rt.p4info import load_committed
from softswitch.cli import request
from tests.golden import generate as G
from tests.switch.p4rt_support import CODEC, IDX, free_port, register_update, wait_listening
from topologies.bmv2_switch import LOG_LEVEL
from topologies.procs import stop_process
from topologies.vethlab import PACKET_OUTGOING, VethLab

REPO = Path(__file__).resolve().parents[2]
DEVICE_ID = 3
PORTS = (1, 2, 3, 4)  # p0l0: hosts h0 and h1 on 1 and 2, spines on 3 and 4
SWITCH = G.T0A
UPLINK, HOST_PORT = G.FABRIC.uplink_port(0), G.FABRIC.host_port(0)
SPINE_PORTS = tuple(G.FABRIC.uplink_port(j) for j in range(G.FABRIC.t1_per_plane))
DEPTHS = (0, G.ECN_THRESHOLD - 1, G.ECN_THRESHOLD, G.TRIM_THRESHOLD - 1, G.TRIM_THRESHOLD, 500)
UNLIMITED_PPS = 1_000_000  # far above what the lab can send, the same on both targets
HELD_PPS = 1  # the held data queue: one departure per second
OUTPUT_WAIT_S, LOST_AFTER_S = 0.004, 1.5
MAX_PAYLOAD = 1500 - 134 - 4  # the largest data payload a 1500-byte MTU carries (ImmDt)
CUTS = (14, 20, 53, 54, 60, 93, 94, 101, 102, 113, 114, 133, 134)  # header boundaries, +-1


@dataclass(frozen=True)
class Setup:
    """What a corpus runner installs: p0l0's entries, no register presets."""

    entities: tuple
    register_cells: tuple = ()


def setup() -> Setup:
    return Setup(corpus.parse_entities(G.switch_entries(SWITCH), SWITCH.name))


# ---- frames -------------------------------------------------------------------------------

def _destinations(rng: random.Random) -> IPv6Address:
    """An outer destination as p0l0 sees it: routable uSID paths, unknown or exhausted
    uSID lists, or a plain IPv6 address (baseline routing)."""
    f = G.FABRIC
    arriving = f.paths(2, 0, 0)[rng.randrange(2)].address  # h2 -> h0, after T0B and spine
    choices = [f.paths(0, 2, 0)[0].address, f.paths(0, 2, 0)[1].address,
               f.paths(0, 1, 0)[0].address,
               IPv6Address(shift_usid(shift_usid(int(arriving)))),
               usid_address([SWITCH.usid, rng.randrange(1 << 16)]),
               usid_address([rng.randrange(1 << 16)]), usid_address([SWITCH.usid]),
               f.nic(1, 0).address, f.nic(2, 0).address, IPv6Address(rng.getrandbits(128))]
    return rng.choice(choices)


def _envelope(rng: random.Random, dscp: int) -> W.Envelope:
    hop = rng.choice((64, 64, 64, 3, 2, 1, 0, rng.randrange(256)))
    return W.Envelope(G.H0.mac, SWITCH.mac, G.H0.address, _destinations(rng), G.H0.address,
                      G.H2.address, rng.getrandbits(32), dscp, rng.randrange(4), hop)


def data_frame(rng: random.Random) -> bytes:
    op = rng.choice(sorted(W.DATA_OPCODES))
    n = rng.choice((0, 1, 16, 64, 256, 1024, rng.randrange(MAX_PAYLOAD + 1)))
    imm = rng.getrandbits(32) if op in W.IMM_OPCODES else None
    pkt = W.DataPacket(W.Bth(op, dest_qp=rng.randrange(1 << 24), psn=rng.randrange(1 << 24)),
                       W.Meth(msn=rng.randrange(1 << 16)),
                       W.Reth(va=rng.getrandbits(64), rkey=rng.getrandbits(32), dma_len=n),
                       bytes(rng.getrandbits(8) for _ in range(n)), imm)
    dscp = rng.choice((W.DSCP_TRIMMABLE, W.DSCP_TRIMMABLE, W.DSCP_TRIMMABLE_RETX,
                       W.DSCP_NO_TRIM, rng.randrange(64)))
    return W.encode_frame(_envelope(rng, dscp), W.encode_packet(pkt))


def control_frame(rng: random.Random) -> bytes:
    bth = W.Bth(W.OP_SACK, dest_qp=rng.randrange(1 << 24), psn=rng.randrange(1 << 24))
    kind = rng.randrange(4)
    if kind == 0:
        pkt: W.Packet = W.SackPacket(bth, W.SackExt(cack_psn=rng.randrange(1 << 24),
                                                    ack_psn_offset=rng.randrange(-100, 100),
                                                    entropy=rng.getrandbits(32), sack_offset=0,
                                                    sack_bitmap=rng.getrandbits(64)),
                                     W.CcState(ooo_count=3, rcvd_bytes=4096))
    elif kind == 1:
        pkt = W.NackPacket(W.Bth(W.OP_NACK, bth.dest_qp, bth.psn),
                           W.NackExt(rng.choice((W.NACK_TRIMMED, W.NACK_PSN_OOR_WINDOW)),
                                     rng.getrandbits(32), nack_psn=rng.randrange(1 << 24),
                                     cack_psn=rng.randrange(1 << 24)))
    elif kind == 2:
        pkt = W.ProbePacket(W.Bth(W.OP_PROBE, bth.dest_qp, bth.psn),
                            W.ProbeExt(rng.getrandbits(32)))
    else:
        pkt = W.PortStatusPacket(W.Bth(rng.choice((W.OP_EP_REQ, W.OP_EP_RSP)), 0x2, bth.psn),
                                 W.PortStatusExt(rng.randrange(1 << 16), rng.randrange(16)))
    return W.encode_frame(_envelope(rng, W.DSCP_CONTROL), W.encode_packet(pkt))


def trimmed_frame(rng: random.Random) -> bytes:
    frame = bytearray(data_frame(rng)[:W.TRIMMED_FRAME_LEN])
    dscp = rng.choice((W.DSCP_TRIMMED, W.DSCP_TRIMMED_LASTHOP))
    frame[14:16] = ((6 << 12) | (dscp << 6) | (frame[15] & 0x3F) | 0).to_bytes(2, "big")
    frame[18:20] = (W.TRIMMED_FRAME_LEN - 54).to_bytes(2, "big")
    frame[58:60] = (W.TRIMMED_FRAME_LEN - 94).to_bytes(2, "big")
    frame[98:100] = (W.TRIMMED_FRAME_LEN - 94).to_bytes(2, "big")
    return bytes(frame)


def baseline_frame(rng: random.Random) -> bytes:
    dst = rng.choice((G.FABRIC.nic(1, 0).address, G.FABRIC.nic(2, 0).address,
                      G.FABRIC.nic(3, 0).address, IPv6Address("fd00:0:7::1")))
    frame = bytearray(G.baseline_frame(dst, tcp=rng.random() < 0.5,
                                       hop_limit=rng.choice((64, 2, 1))))
    frame[14:18] = ((6 << 28) | (rng.randrange(256) << 20) | rng.getrandbits(20)).to_bytes(4, "big")
    frame[54:58] = rng.getrandbits(32).to_bytes(4, "big")  # L4 ports: spread the ECMP hash
    return bytes(frame)


def mutate(rng: random.Random, frame: bytes) -> tuple[str, bytes]:
    f = bytearray(frame)
    kind = rng.choice(("truncate", "outer_len", "inner_len", "version", "hop", "ethertype",
                       "next_header", "udp_port", "flip"))
    if kind == "truncate":
        cut = rng.choice([c + d for c in CUTS for d in (-1, 0, 1)] + [rng.randrange(14, len(f))])
        f = f[:max(14, min(cut, len(f)))]
    elif kind in ("outer_len", "inner_len"):
        at = 18 if kind == "outer_len" else 58
        if len(f) >= at + 2:
            value = int.from_bytes(f[at:at + 2], "big") + rng.choice((-9, -1, 1, 7, 3000))
            f[at:at + 2] = (value % 65536).to_bytes(2, "big")
    elif kind == "version":
        at = rng.choice((14, 54))
        if len(f) > at:
            f[at] = (rng.choice((0, 4, 7, 15)) << 4) | (f[at] & 0x0F)
    elif kind == "hop" and len(f) > 21:
        f[21] = rng.choice((0, 1, 2))
    elif kind == "ethertype":
        f[12:14] = rng.choice((b"\x08\x00", b"\x81\x00", b"\x88\xb5"))
    elif kind == "next_header" and len(f) > 20:
        f[20] = rng.choice((6, 17, 41, 59, 43, rng.randrange(256)))
    elif kind == "udp_port" and len(f) > 97:
        f[96:98] = rng.choice((4790, 4792, 0, 53)).to_bytes(2, "big")
    elif kind == "flip":
        at = rng.randrange(len(f))
        f[at] ^= 1 << rng.randrange(8)
    return f"mutated_{kind}", bytes(f)


def random_frame(rng: random.Random) -> bytes:
    body = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
    ethertype = rng.choice((b"\x86\xdd", b"\x86\xdd", b"\x08\x00", bytes(2)))
    return bytes(6) + bytes(6) + ethertype + body


MAKERS = {"data": data_frame, "control": control_frame, "trimmed": trimmed_frame,
          "baseline": baseline_frame}


@dataclass(frozen=True)
class Probe:
    category: str
    port: int
    frame: bytes
    preset: tuple[int, int] | None = None  # (egress port, depth) written before the frame


def generate(seed: int, count: int) -> list[Probe]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.08:
            category, frame = "random", random_frame(rng)
        else:
            category = rng.choice(sorted(MAKERS))
            frame = MAKERS[category](rng)
            if roll < 0.45:
                category, frame = mutate(rng, frame)
        preset = (rng.choice(PORTS), rng.choice(DEPTHS)) if rng.random() < 0.35 else None
        out.append(Probe(category, rng.choice(PORTS), frame, preset))
    return out


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

    def counter(self, name: str) -> list[int]:
        assert self.client is not None
        entity = p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(
            counter_id=IDX.id_of(name)))
        cells = {e.counter_entry.index.index: e.counter_entry.data.packet_count
                 for r in self.client.read_one(entity) for e in r.entities}
        return [cells.get(i, 0) for i in range(max(cells, default=-1) + 1)]


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
    """("out", [(port, hex)]), ("drop", reason) or ("lost",): what one frame became."""
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


def _envelope_up(rng: random.Random, dscp: int) -> W.Envelope:
    """h0 across spine 0: p0l0 sends it on the uplink."""
    return W.Envelope(G.H0.mac, SWITCH.mac, G.H0.address, G.FABRIC.paths(0, 2, 0)[0].address,
                      G.H0.address, G.H2.address, rng.getrandbits(32), dscp, W.ECN_ECT0)


def _flow(dscp: int, rng: random.Random, payload: int = 512) -> bytes:
    pkt = W.DataPacket(W.Bth(W.OP_WRITE_MIDDLE, 0x100, rng.randrange(1 << 24)), W.Meth(1),
                       W.Reth(rng.getrandbits(64), 7, payload), bytes(payload))
    return W.encode_frame(_envelope_up(rng, dscp), W.encode_packet(pkt))


def _sack(rng: random.Random) -> bytes:
    pkt = W.SackPacket(W.Bth(W.OP_SACK, 0x101, 0),
                       W.SackExt(cack_psn=rng.randrange(1 << 24), ack_psn_offset=1,
                                 entropy=rng.getrandbits(32), sack_offset=0, sack_bitmap=1),
                       W.CcState(ooo_count=0, rcvd_bytes=512))
    return W.encode_frame(_envelope_up(rng, W.DSCP_CONTROL), W.encode_packet(pkt))


def _trimmed_header(rng: random.Random) -> bytes:
    frame = bytearray(_flow(W.DSCP_TRIMMED, rng)[:W.TRIMMED_FRAME_LEN])
    frame[18:20] = (W.TRIMMED_FRAME_LEN - 54).to_bytes(2, "big")
    frame[58:60] = frame[98:100] = (W.TRIMMED_FRAME_LEN - 94).to_bytes(2, "big")
    return bytes(frame)


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
    steps.append(exchange(target, wire, HOST_PORT, _flow(W.DSCP_TRIMMABLE, rng)))  # leaves
    for _ in range(3):
        wire.send(HOST_PORT, _flow(W.DSCP_TRIMMABLE, rng))  # held: one per second
    steps.append(exchange(target, wire, HOST_PORT, _sack(rng)))
    target.set_depth(UPLINK, G.TRIM_DEPTH)
    steps.append(exchange(target, wire, HOST_PORT, _flow(W.DSCP_TRIMMABLE_RETX, rng)))
    steps.append(exchange(target, wire, HOST_PORT, _trimmed_header(rng)))
    wire.send(HOST_PORT, _flow(W.DSCP_NO_TRIM, rng))  # held too, CE-marked
    steps.append(exchange(target, wire, HOST_PORT, _sack(rng)))
    target.set_queue_rate(UNLIMITED_PPS, UPLINK, N.PRIORITY_DATA)  # not for queued packets
    steps.append(("drained", wire.until_quiet(1.0 / HELD_PPS + 0.5)))
    steps.append(exchange(target, wire, HOST_PORT, _flow(W.DSCP_TRIMMABLE, rng)))
    return steps


@dataclass
class Run:
    outcomes: list
    held: list
    counters: dict
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
                # Every frame starts from the same register state on both targets: after an
                # ECMP frame took different spines, the ports' states would differ.
                depths = dict.fromkeys(PORTS, 0)
                if probe.preset is not None:
                    depths[probe.preset[0]] = probe.preset[1]
                target.set_depths(depths)
                outcomes.append(exchange(target, wire, probe.port, probe.frame))
            held = held_queue(target, wire, seed)
            counters = {name: target.counter(name)
                        for name in (N.DROP_COUNTER, N.TRIM_COUNTER, N.ECN_MARK_COUNTER)}
        finally:
            wire.close()
    return Run(outcomes, held, counters, time.monotonic() - start)


def ecmp_choice_only(a: tuple, b: tuple) -> bool:
    """Both forwarded the frame, to different members of p0l0's spine group (the only
    multi-member ECMP group): the software switch hashes with CRC-32, BMv2 with crc16
    (p4src/README.md, "ECMP"). What follows the choice (next-hop MAC, and trim or ECN,
    which read the chosen port's queue depth) is then not comparable."""
    if a[0] != "out" or b[0] != "out" or len(a[1]) != 1 or len(b[1]) != 1:
        return False
    pa, pb = a[1][0][0], b[1][0][0]
    return pa != pb and {pa, pb} <= set(SPINE_PORTS)


def compare(probes: list[Probe], soft: Run, bmv2: Run) -> list[dict]:
    """Every disagreement, with what a developer needs to reproduce it."""
    out = []
    for i, (probe, a, b) in enumerate(zip(probes, soft.outcomes, bmv2.outcomes, strict=True)):
        if a != b and not ecmp_choice_only(a, b):
            out.append({"index": i, "category": probe.category, "port": probe.port,
                        "preset": probe.preset, "frame": probe.frame.hex(), "soft": a,
                        "bmv2": b})
    if soft.held != bmv2.held:
        out.append({"index": "held_queue", "soft": soft.held, "bmv2": bmv2.held})
    differs = sum(a != b and ecmp_choice_only(a, b)
                  for a, b in zip(soft.outcomes, bmv2.outcomes, strict=True))
    # Trims and CE marks are per egress port: comparable only when every ECMP choice agreed.
    names = [N.DROP_COUNTER] if differs else list(soft.counters)
    for name in names:
        width = max(len(soft.counters[name]), len(bmv2.counters[name]))
        a = soft.counters[name] + [0] * (width - len(soft.counters[name]))
        b = bmv2.counters[name] + [0] * (width - len(bmv2.counters[name]))
        if a != b:
            out.append({"index": f"counter {name}",
                        "soft": {i: v for i, v in enumerate(a) if v},
                        "bmv2": {i: v for i, v in enumerate(b) if v}})
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
            "lost": {"soft": sum(o == ("lost",) for o in soft.outcomes),
                     "bmv2": sum(o == ("lost",) for o in bmv2.outcomes)},
            "ecmp_member_differs": sum(a != b and ecmp_choice_only(a, b)
                                       for a, b in zip(soft.outcomes, bmv2.outcomes, strict=True)),
            "held_queue": bmv2.held, "disagreements": compare(probes, soft, bmv2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.switch.differential", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=2000, help="generated frames (default 2000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = p.parse_args(argv)
    if args.count < 1:
        p.error("--count must be at least 1")
    report = differential(args.seed, args.count)
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print(f"seed {report['seed']}: {report['frames']} frames {report['categories']}")
        print(f"outcomes {report['outcomes']}, lost {report['lost']}, ECMP member choices that "
              f"differ {report['ecmp_member_differs']}, seconds "
              f"{ {k: round(v, 1) for k, v in report['seconds'].items()} }")
        for d in report["disagreements"]:
            print(f"DISAGREE {d}")
        print(f"{len(report['disagreements'])} disagreement(s)")
    return 1 if report["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
