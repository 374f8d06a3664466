"""BMv2 behaviours the program relies on that only a live queue shows, on simple_switch_grpc
and on the software switch alike (p4src/README.md, "BMv2 behaviours this program relies on").

- Strict priority: control frames and trimmed headers overtake a held data queue; each
  queue stays first in, first out.
- What the depths count: `enq_qdepth`/`deq_qdepth` are the packet's own priority queue
  (a probe program records them per packet on BMv2), so the depth register must keep the
  data queue's depth while high-priority frames leave (read back over Thrift / P4Runtime;
  the pre-fix egress, compiled from a patched copy, must fail that check).
- `set_queue_depth` without a priority limits every priority queue of the port, with one
  only that queue.

Where the other behaviours are held: `truncate` cutting after the deparser and parser errors
reaching ingress by the golden corpus cases `trim_*` and `malformed_short_*`
(tests/switch/p4/test_p4_bmv2.py on BMv2); the default depth of 64 and per-priority rates by
tests/switch/p4/test_p4_queues.py; the standing-queue regression by
tests/switch/p4/test_p4_queue_depth.py.
Frames carry a tag in the BTH PSN so every output is matched to its input; checks are on
counts and order. Held queues depart every 1/RATE s, far longer than sending a burst takes.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from p4.v1 import p4runtime_pb2

import wire as W
from controller import p4build
from p4rt import names as N
from p4rt.corpus import load_cases
from rigs import bmv2_corpus
from rigs.vethlab import VethLab
from softswitch.cli import request
from tests.support import require_bmv2, require_root
from tests.switch import differential as D
from tests.switch.frame_support import envelope_up, trimmed_header

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]

HELD_PPS = 2  # the held data queue: one departure every 0.5 s
DATA = 6  # data frames held behind the pacer, tags 1..DATA
CONTROL_TAGS = range(101, 105)
PSN_AT = W.ETH_LEN + 2 * W.IPV6_LEN + W.UDP_LEN + 9  # BTH PSN, 3 bytes
DEPTH_PPS = 5  # the depth checks: after a departure the queue waits 200 ms for the next
SMALL_DEPTH, BURST = 4, 9
BMV2_TOOLS = ("simple_switch_grpc", "p4c-bm2-ss")

# the pre-fix egress: every packet wrote its own queue's enq_qdepth
OLD_EGRESS = """queue_depth_register.write((bit<32>)standard_metadata.egress_port,
                               standard_metadata.enq_qdepth);"""
# records each tagged packet's depths, then runs the real egress unchanged
PROBE_DECLS = """register<bit<32>>(1024) probe_enq;
    register<bit<32>>(1024) probe_deq;"""
PROBE_EGRESS = """if (hdr.bth.isValid()) {
            probe_enq.write((bit<32>)hdr.bth.psn[9:0], (bit<32>)standard_metadata.enq_qdepth);
            probe_deq.write((bit<32>)hdr.bth.psn[9:0], (bit<32>)standard_metadata.deq_qdepth);
        }"""


# ---- frames ---------------------------------------------------------------------------------

def tag_of(frame: bytes) -> int:
    return int.from_bytes(frame[PSN_AT:PSN_AT + 3], "big")


def data(tag: int, rng: random.Random) -> bytes:
    """Untrimmable data for the uplink: it joins the data queue whatever the depth."""
    pkt = W.DataPacket(W.Bth(W.OP_WRITE_MIDDLE, 0x100, tag), W.Meth(1),
                       W.Reth(rng.getrandbits(64), 7, 256), bytes(256))
    return W.encode_frame(envelope_up(rng, W.DSCP_NO_TRIM), W.encode_packet(pkt))


def control(tag: int, rng: random.Random) -> bytes:
    """High priority, by kind in turn: SACK, trimmed header, NACK, probe."""
    kind = tag % 4
    if kind == 2:
        frame = bytearray(trimmed_header(rng))
        frame[PSN_AT:PSN_AT + 3] = tag.to_bytes(3, "big")
        return bytes(frame)
    if kind == 1:
        pkt: W.Packet = W.SackPacket(
            W.Bth(W.OP_SACK, 0x101, tag),
            W.SackExt(cack_psn=1, ack_psn_offset=1, entropy=rng.getrandbits(32), sack_offset=0,
                      sack_bitmap=1), W.CcState(ooo_count=0, rcvd_bytes=256))
    elif kind == 3:
        pkt = W.NackPacket(W.Bth(W.OP_NACK, 0x101, tag),
                           W.NackExt(W.NACK_TRIMMED, rng.getrandbits(32), 5, 1))
    else:
        pkt = W.ProbePacket(W.Bth(W.OP_PROBE, 0x101, tag), W.ProbeExt(rng.getrandbits(32)))
    return W.encode_frame(envelope_up(rng, W.DSCP_CONTROL), W.encode_packet(pkt))


# ---- targets: the differential test's, plus depth per priority and register reads ----------

class SoftLive(D.SoftTarget):
    """The software switch; its register is readable over P4Runtime (BMv2's is not)."""

    def set_priority_depth(self, packets: int, port: int, priority: int) -> None:
        request(self.control_port, {"cmd": "set_queue_depth", "depth": packets, "port": port,
                                    "priority": priority})

    def read_depth(self, port: int) -> int:
        assert self.client is not None
        entity = p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry(
            register_id=D.IDX.id_of(N.QUEUE_DEPTH_REGISTER),
            index=p4runtime_pb2.Index(index=port)))
        (value,) = [int.from_bytes(e.register_entry.data.bitstring, "big")
                    for r in self.client.read_one(entity) for e in r.entities]
        return value


class Bmv2Live(D.Bmv2Target):
    """BMv2, optionally running a patched copy of the program (`program` = its JSON)."""

    program: bytes | None = None

    def device_config(self) -> bytes:
        return self.program if self.program is not None else super().device_config()

    def set_priority_depth(self, packets: int, port: int, priority: int) -> None:
        self._thrift()[1].set_egress_priority_queue_depth(port, priority, packets)

    def read_register(self, name: str, index: int) -> int:
        return self._thrift()[0].bm_register_read(0, name, index)

    def read_depth(self, port: int) -> int:
        return self.read_register(N.QUEUE_DEPTH_REGISTER, port)


Live = SoftLive | Bmv2Live


def patched_program(tmp: Path, body: str, decls: str = "", keep: bool = True) -> Path:
    """Compile p4src/ with `body` added to the egress apply block (before the real one, or
    instead of it with keep=False) and `decls` before it; returns the BMv2 JSON."""
    src = tmp / "p4src"
    shutil.copytree(p4build.P4SRC, src, ignore=shutil.ignore_patterns("build"))
    egress = src / "include" / "egress.p4"
    text = egress.read_text()
    start = text.index("    apply {")
    end = text.index("\n    }\n}", start)
    real = text[start + len("    apply {"):end]
    egress.write_text(text[:start] + f"    {decls}\n    apply {{\n        {body}\n"
                      + (real if keep else "") + text[end:])
    subprocess.run([str(src / "build.sh"), str(tmp / "build")], check=True,
                   capture_output=True, text=True)
    return tmp / "build" / "mrc.json"


def _skip_unless(target: str) -> None:
    require_root("veth pairs and namespaces")
    if target == "bmv2":
        require_bmv2(BMV2_TOOLS)


_LABS = itertools.count()


@pytest.fixture
def lab() -> Iterator[VethLab]:
    """A fresh veth lab per test (names unique to this process)."""
    require_root("veth pairs and namespaces")
    with VethLab(f"bh{os.getpid() % 1000}{next(_LABS)}", len(D.PORTS)) as lab:
        yield lab


class Log:
    """Every frame that left the switch, in arrival order, as (port, tag, length)."""

    def __init__(self, wire: D.Wire) -> None:
        self.wire = wire
        self.seen: list[tuple[int, int, int]] = []

    def poll(self, wait: float) -> None:
        for port, hexed in self.wire.receive(wait):
            frame = bytes.fromhex(hexed)
            self.seen.append((port, tag_of(frame), len(frame)))

    def until(self, tag: int, limit: float = 5.0) -> None:
        """Listen until the frame tagged `tag` has left (limit: only against a hang)."""
        deadline = time.monotonic() + limit
        while tag not in self.tags() and time.monotonic() < deadline:
            self.poll(0.01)
        assert tag in self.tags(), f"frame {tag} never left: {self.seen}"

    def quiet(self, wait: float) -> None:
        """Listen until nothing has left for `wait` seconds (a held queue has drained)."""
        before = -1
        while before != len(self.seen):
            before = len(self.seen)
            self.poll(wait)

    def tags(self) -> list[int]:
        return [t for _, t, _ in self.seen]

    def data_out(self) -> int:
        return sum(1 for t in self.tags() if t <= DATA)


# ---- (c) + (d): strict priority, and the register while control frames leave ---------------

def held_data_with_control(target: Live, wire: D.Wire) -> tuple[Log, list[tuple[int, int, int]]]:
    """DATA frames held behind the pacer, then control frames of every kind; returns the
    log and, per control frame after the first, (register, data out before, data out after).

    The first control frame passes ingress after every data frame (ingress is FIFO); once it
    has left before data frame 2, frame 2 left a queue holding all the others, so from then
    on the register must read DATA - (data frames out)."""
    rng = random.Random(7)
    log = Log(wire)
    target.set_queue_rate(HELD_PPS, D.UPLINK, N.PRIORITY_DATA)
    for tag in range(1, DATA + 1):
        wire.send(D.HOST_PORT, data(tag, rng))
    first, *rest = CONTROL_TAGS
    wire.send(D.HOST_PORT, control(first, rng))
    log.until(first)
    log.until(2)
    samples = []
    for tag in rest:
        before = log.data_out()
        wire.send(D.HOST_PORT, control(tag, rng))
        log.until(tag)
        depth = target.read_depth(D.UPLINK)
        log.poll(0.02)  # a data departure racing the read shows up here
        samples.append((depth, before, log.data_out()))
    log.quiet(1.0 / HELD_PPS + 0.5)
    target.set_queue_rate(D.UNLIMITED_PPS, D.UPLINK, N.PRIORITY_DATA)
    return log, samples


def _run_held(cls: type[Live], lab: VethLab) -> tuple[Log, list[tuple[int, int, int]], int]:
    with cls(lab) as target:
        wire = D.Wire(lab)
        try:
            log, samples = held_data_with_control(target, wire)
            return log, samples, target.read_depth(D.UPLINK)
        finally:
            wire.close()


def _register_followed_the_data_queue(samples: list[tuple[int, int, int]]) -> bool:
    """Each read equals DATA minus the data frames out at that moment, while data waited."""
    return all(after < DATA and depth in {DATA - d for d in range(before, after + 1)}
               for depth, before, after in samples)


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_control_overtakes_held_data_and_leaves_the_depth_alone(target: str, lab) -> None:
    _skip_unless(target)
    log, samples, final = _run_held(SoftLive if target == "soft" else Bmv2Live, lab)
    tags = log.tags()
    assert {p for p, _, _ in log.seen} == {D.UPLINK}
    assert [t for t in tags if t <= DATA] == list(range(1, DATA + 1)), tags  # FIFO
    assert [t for t in tags if t > DATA] == list(CONTROL_TAGS), tags  # FIFO
    # every control frame overtook data sent before it (priority 1 served first)
    assert all(tags.index(c) < tags.index(DATA) for c in CONTROL_TAGS), tags
    assert tags.index(CONTROL_TAGS[0]) < tags.index(2), tags
    assert [n for _, t, n in log.seen if t == 102] == [W.TRIMMED_FRAME_LEN]  # not re-trimmed
    assert _register_followed_the_data_queue(samples), samples
    assert final == 0  # the last data frame out left an empty queue behind


@pytest.mark.bmv2
def test_the_old_egress_lets_control_frames_reset_the_depth(tmp_path: Path, lab) -> None:
    """The check above is not blind: the pre-fix egress fails it (a SACK or trimmed header
    leaving its empty queue writes 0 while data waits)."""
    _skip_unless("bmv2")
    program = patched_program(tmp_path, OLD_EGRESS, keep=False).read_bytes()
    cls = type("OldBmv2", (Bmv2Live,), {"program": program})
    log, samples, _ = _run_held(cls, lab)
    assert [t for t in log.tags() if t > DATA] == list(CONTROL_TAGS)  # same traffic
    assert not _register_followed_the_data_queue(samples), samples
    assert 0 in [depth for depth, _, _ in samples], samples


@pytest.mark.bmv2
def test_enq_and_deq_qdepth_count_the_packets_own_queue(tmp_path: Path, lab) -> None:
    """A probe copy of the program records every tagged packet's enq_qdepth/deq_qdepth. A
    control frame arriving while data waits in the port's other queue sees 0 and 0; data
    frames see the data queue (behavioral-model PR #1270, simple_switch 1.15.1)."""
    _skip_unless("bmv2")
    program = patched_program(tmp_path, PROBE_EGRESS, PROBE_DECLS).read_bytes()
    cls = type("ProbeBmv2", (Bmv2Live,), {"program": program})
    with cls(lab) as target:
        wire = D.Wire(lab)
        try:
            log, _ = held_data_with_control(target, wire)
            tags = list(range(1, DATA + 1)) + list(CONTROL_TAGS)
            enq = {t: target.read_register("EgressPipeImpl.probe_enq", t) for t in tags}
            deq = {t: target.read_register("EgressPipeImpl.probe_deq", t) for t in tags}
        finally:
            wire.close()
    order = log.tags()
    assert order.index(CONTROL_TAGS[0]) < order.index(2), order
    for c in CONTROL_TAGS:
        waiting = sum(1 for t in order[order.index(c):] if t <= DATA)
        assert waiting >= 1 and (enq[c], deq[c]) == (0, 0), (c, waiting, enq, deq)
    assert enq[1] == 0
    for k in range(2, DATA + 1):  # data 1 may or may not have left when k arrived
        assert enq[k] in (k - 2, k - 1), enq
        assert deq[k] == DATA - k, deq  # it left after every data frame had been queued


# ---- (e): set_queue_depth with and without a priority --------------------------------------

def _burst_through(target: Live, wire: D.Wire, make: Callable[[random.Random], bytes],
                   rng: random.Random) -> int:
    """One frame that leaves at once, then BURST more into the queue it left empty: how many
    of those got out (the next departure is 1/DEPTH_PPS away, so the queue holds what its
    depth allows and tail-drops the rest)."""
    first = D.exchange(target, wire, D.HOST_PORT, make(rng))
    assert first[0] == "out", first
    for _ in range(BURST):
        wire.send(D.HOST_PORT, make(rng))
        time.sleep(0.0005)  # BMv2 loses long back-to-back bursts in its capture ring
    return len(wire.until_quiet(1.0 / DEPTH_PPS + 0.4))


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_queue_depth_without_priority_limits_every_queue(target: str, lab) -> None:
    _skip_unless(target)
    rng = random.Random(9)

    def make_data(r: random.Random) -> bytes:
        return data(1, r)

    def make_control(r: random.Random) -> bytes:
        return control(101, r)

    counts: dict[str, tuple[int, int]] = {}
    with (SoftLive if target == "soft" else Bmv2Live)(lab) as live:
        wire = D.Wire(lab)
        try:
            live.set_queue_rate(DEPTH_PPS, D.UPLINK, None)
            live.set_queue_depth(SMALL_DEPTH, D.UPLINK)  # no priority: both queues
            counts["both"] = (_burst_through(live, wire, make_data, rng),
                              _burst_through(live, wire, make_control, rng))
            live.set_queue_depth(64, D.UPLINK)
            live.set_priority_depth(SMALL_DEPTH, D.UPLINK, N.PRIORITY_HIGH)
            counts["high only"] = (_burst_through(live, wire, make_data, rng),
                                   _burst_through(live, wire, make_control, rng))
            live.set_priority_depth(64, D.UPLINK, N.PRIORITY_HIGH)
            live.set_priority_depth(SMALL_DEPTH, D.UPLINK, N.PRIORITY_DATA)
            counts["data only"] = (_burst_through(live, wire, make_data, rng),
                                   _burst_through(live, wire, make_control, rng))
        finally:
            wire.close()
    assert counts == {"both": (SMALL_DEPTH, SMALL_DEPTH), "high only": (BURST, SMALL_DEPTH),
                      "data only": (SMALL_DEPTH, BURST)}, counts


# ---- the prelude corpus cases, on the pre-fix program ---------------------------------------

@pytest.mark.bmv2
def test_prelude_corpus_cases_fail_on_the_old_egress(tmp_path: Path) -> None:
    """The corpus cases with a prelude are there to catch the per-queue depth bug: on BMv2
    running the pre-fix egress, each of them must fail (and pass on the real one, which
    tests/switch/p4/test_p4_bmv2.py checks)."""
    require_bmv2(bmv2_corpus.TOOLS)
    require_root("veth pairs")
    old = patched_program(tmp_path, OLD_EGRESS, keep=False)

    class OldHarness(bmv2_corpus.Bmv2Harness):
        def _connect(self, json_path: Path, client) -> None:
            super()._connect(old, client)

    cases = [c for c in load_cases() if c.prelude]
    assert cases
    with OldHarness() as harness:
        failed = [c.name for c in cases if bmv2_corpus.check(c, harness.run(c))]
    assert failed == [c.name for c in cases if c.name.startswith("trim_after_")], failed
