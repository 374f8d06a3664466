"""A live `python -m softswitch` process on veth pairs into namespaces (needs root).

The golden corpus runs through the process over P4Runtime and raw sockets; hostile
frames must not kill it; an idle switch must not burn CPU; the runtime control socket
must change the queue rate so a burst gets trimmed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient

import wire as W
from p4rt import corpus
from p4rt import names as N
from p4rt.corpus import case_updates
from rigs.vethlab import VethLab, receive
from safety.procs import stop_process
from softswitch.cli import parse_command, request
from tests.support import wait_until
from tests.switch.p4rt_support import CODEC, IDX, free_port, reset_pipeline, wait_listening

pytestmark = [pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2")]

REPO = Path(__file__).resolve().parents[3]
DEVICE_ID = 7
CASES = corpus.load_cases() if corpus.CASES_PATH.exists() else []
CORPUS_MISSING = (f"the committed golden corpus {corpus.CASES_PATH} is missing or empty: restore "
                  "it from git or regenerate it with `.venv/bin/python -m tests.golden.generate`")


def golden_cases() -> list[corpus.Case]:
    """The committed golden corpus; a test that needs it fails, not skips, without it."""
    assert corpus.CASES_PATH.exists() and CASES, CORPUS_MISSING
    return CASES


@pytest.fixture(scope="module")
def live():
    tag = f"sst{os.getpid() % 100000}"
    grpc_port, control_port = free_port(), free_port()
    with VethLab(tag, 4) as lab:
        cmd = [sys.executable, "-m", "softswitch", "--device-id", str(DEVICE_ID),
               "--grpc-server-addr", f"127.0.0.1:{grpc_port}", "--thrift-port",
               str(control_port), "--priority-queues", str(N.PRIORITY_QUEUES), "--no-p4",
               "--log-level", "warn"]
        for port, ifname in lab.ports.items():
            cmd += ["-i", f"{port}@{ifname}"]
        proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE)
        client = None
        socks = {}
        try:
            wait_listening(grpc_port, proc)
            client = P4RuntimeClient(DEVICE_ID, f"127.0.0.1:{grpc_port}", (0, 1))
            socks = {p: lab.host_socket(p) for p in lab.ports}
            yield proc, client, socks, control_port
        finally:
            for s in socks.values():
                s.close()
            if client is not None:
                client.tear_down()
            stop_process(proc, 10)


def reset(client: P4RuntimeClient, updates: list[p4runtime_pb2.Update]) -> None:
    reset_pipeline(client, DEVICE_ID, updates)


def drop_counts(client: P4RuntimeClient) -> list[int]:
    entity = p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(
        counter_id=IDX.id_of(N.DROP_COUNTER)))
    cells = [e.counter_entry for r in client.read_one(entity) for e in r.entities]
    return [c.data.packet_count for c in sorted(cells, key=lambda c: c.index.index)]


def drain(socks: dict[int, socket.socket]) -> None:
    for s in socks.values():
        while receive(s, 0.01) is not None:
            pass


def test_golden_corpus_live(live):
    proc, client, socks, _ = live
    for case in golden_cases():
        reset(client, case_updates(CODEC, case))
        drain(socks)
        for pre in case.prelude:  # wait until each has left: it sets up queue state
            socks[pre.port].send(pre.frame)
            assert any(receive(s, 0.5) is not None for s in socks.values()), case.name
        drain(socks)
        socks[case.ingress_port].send(case.frame)
        if case.drop_reason is not None:
            assert all(receive(s, 0.05) is None for s in socks.values()), case.name
            counts = drop_counts(client)
            assert counts[N.DROP_REASONS[case.drop_reason]] == 1 and sum(counts) == 1, case.name
            continue
        expected = [(o.port, o.frame) for o in case.outputs]
        if case.one_of:
            got = [(p, receive(s, 0.3)) for p, s in socks.items()]
            got = [(p, f) for p, f in got if f is not None]
            assert len(got) == 1 and got[0] in expected, case.name
        else:
            for port, frame in expected:
                assert receive(socks[port], 2.0) == frame, case.name
    assert proc.poll() is None


def test_hostile_frames_are_counted_and_survived(live):
    proc, client, socks, _ = live
    case = next(c for c in golden_cases() if c.name == "usid_shift_t0_up")
    reset(client, case_updates(CODEC, case))
    rng = random.Random(11)
    good = case.frame
    for i in range(600):
        if i % 3 == 0:
            frame = bytes(rng.randrange(256) for _ in range(rng.randrange(14, 300)))
        elif i % 3 == 1:
            frame = good[:rng.randrange(14, len(good))]  # the kernel refuses < 14
        else:
            mutated = bytearray(good)
            for _ in range(rng.randrange(1, 6)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            frame = bytes(mutated)
        socks[1].send(frame)

    def counted() -> bool:
        counts = drop_counts(client)
        return counts[N.DROP_MALFORMED] > 50 and counts[N.DROP_NOT_IPV6] > 50

    wait_until(counted, "more than 50 MALFORMED and NOT_IPV6 drops counted")
    assert proc.poll() is None
    drain(socks)
    socks[1].send(good)
    assert receive(socks[3], 2.0) == case.outputs[0].frame


def test_frames_the_kernel_drops_while_the_switch_is_paused_are_counted(live):
    """A switch process that is not scheduled loses frames in its socket buffer, where no
    queue counter sees them; the stats command reports them as rx_kernel_drops."""
    proc, client, socks, control = live
    reset(client, [])
    start = request(control, {"cmd": "stats"})["stats"]
    frame = bytes(14) + bytes(1486)  # 1,500 bytes; dropped by the pipeline if it ever runs
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        for _ in range(8000):  # 12 MB: three times the 4 MiB receive buffer
            socks[1].send(frame)
    finally:
        os.kill(proc.pid, signal.SIGCONT)

    def dropped() -> dict | None:
        stats = request(control, {"cmd": "stats"})["stats"]
        return stats if stats["rx_kernel_drops"] - start["rx_kernel_drops"] > 1000 else None

    end = wait_until(dropped, "the stats command to report over 1000 kernel drops")
    assert 0 < end["rx"] - start["rx"] < 8000
    assert proc.poll() is None


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_switch_uses_no_cpu(live):
    proc, client, socks, _ = live
    reset(client, [])
    time.sleep(0.5)
    before = _cpu_seconds(proc.pid)
    time.sleep(3.0)
    used = _cpu_seconds(proc.pid) - before
    assert used < 0.15, f"idle softswitch used {used:.2f} s CPU in 3 s"


def test_queue_rate_makes_a_burst_trim(live):
    """60 frames queue behind a 100 pps port (trim threshold 20 in this case). Once departures
    have written a depth >= 20 into the register (the 21st departure, ~0.2 s), the next 10
    are trimmed and overtake; the queue still holds > 20 so their own departures keep the
    register above the threshold (the register holds the last departure's enq_qdepth)."""
    proc, client, socks, control = live
    case = next(c for c in golden_cases() if c.name == "usid_shift_t0_up")
    reset(client, case_updates(CODEC, case))
    request(control, parse_command(["set_queue_rate", "100", "3"]))
    before = request(control, {"cmd": "queues"})["queues"]["3"]
    try:
        drain(socks)
        for _ in range(60):
            socks[1].send(case.frame)
        time.sleep(0.3)
        for _ in range(10):
            socks[1].send(case.frame)
        frames = []
        while (f := receive(socks[3], 1.0)) is not None:
            frames.append(f)
        sizes = [len(f) for f in frames]
        assert sizes.count(W.TRIMMED_FRAME_LEN) == 10 and sizes.count(len(case.frame)) == 60
        first_trimmed = sizes.index(W.TRIMMED_FRAME_LEN)
        assert first_trimmed < len(sizes) - 1 - sizes[::-1].index(len(case.frame))
        after = request(control, {"cmd": "queues"})["queues"]["3"]
        sent = [a["sent"] - b["sent"] for a, b in zip(after, before, strict=True)]
        assert sent[N.PRIORITY_HIGH] == 10 and sent[N.PRIORITY_DATA] == 60
    finally:
        request(control, parse_command(["set_queue_rate", "0", "3"]))
