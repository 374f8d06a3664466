"""Run golden corpus cases (tests/golden) on a real simple_switch_grpc.

The harness compiles p4src/mrc.p4, creates veth pairs named after this process, starts
simple_switch_grpc on the switch ends (gRPC on 127.0.0.1, Thrift for register writes),
pushes the pipeline over P4Runtime and, per case: installs the entries, presets the
queue-depth register, sends the frame on the host end of the ingress port, collects what
arrives on every host end, reads counters, removes the entries. Everything it creates is
removed by name/PID in close(), also on failure. Used by tests/switch/p4/test_p4_bmv2.py and by
the P4 exercises' grader (rubrics/p4.py), which runs it inside a grading copy of the project so
that p4build compiles (or finds) the student's program.
"""

from __future__ import annotations

import os
import queue
import select
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller import p4build
from nodes.bmv2_switch import bmv2_command, runtime_cli
from p4rt import names as n
from p4rt import tls
from p4rt.codec import Codec
from p4rt.corpus import Case
from p4rt.entities import TableEntry
from p4rt.p4info import P4InfoIndex
from safety import credentials, shield
from safety.privdir import PrivateDir
from safety.procs import stop_process

TOOLS = ("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI")
ETH_P_ALL = 0x0003
DEVICE_ID = 1
ELECTION_ID = p4runtime_pb2.Uint128(high=0, low=1)
QUIET_S = 0.4  # how long to keep listening after the last frame arrived
START_TIMEOUT_S = 20.0


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Observed:
    outputs: list[tuple[int, bytes]]
    counter_deltas: dict[str, dict[int, int]]


class Bmv2Harness:
    """One switch process and its veths; use as a context manager."""

    def __init__(self, ports: int = 4) -> None:
        self.tag = f"p4t{os.getpid() % 100000}"
        self.ports = list(range(1, ports + 1))
        self.links: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.channel = None
        self._stream_q: queue.Queue = queue.Queue()
        self._stream = None
        self.socks: dict[int, socket.socket] = {}
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        self.grpc_port = _free_port()
        self.thrift_port = _free_port()
        self.shield: str | None = None  # this harness's nftables table over its two ports

    # ---- set-up and tear-down -------------------------------------------------------------
    def __enter__(self) -> Bmv2Harness:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sw(self, port: int) -> str:
        return f"{self.tag}s{port}"

    def _host(self, port: int) -> str:
        return f"{self.tag}h{port}"

    def _start(self) -> None:
        json_path, p4info_path = p4build.ensure_compiled()
        self.p4info = text_format.Parse(p4info_path.read_text(), p4info_pb2.P4Info())
        self.codec = Codec(P4InfoIndex.build(self.p4info))
        for p in self.ports:
            subprocess.run(["ip", "link", "add", self._sw(p), "type", "veth", "peer", "name",
                            self._host(p)], check=True)
            self.links.append(self._sw(p))
            for ifname in (self._sw(p), self._host(p)):
                # No IPv6 autoconfiguration: router solicitations would hit the drop counters.
                subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"],
                               check=True)
                subprocess.run(["ip", "link", "set", ifname, "up"], check=True)
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # nothing until bound
            sock.bind((self._host(p), ETH_P_ALL))
            self.socks[p] = sock
        # the same protection as a fabric's switches: Thrift shielded, P4Runtime over mTLS
        self.shield = shield.install([self.thrift_port, self.grpc_port])
        with PrivateDir(self.workdir / "keys") as keys:
            creds = credentials.issue(keys)
        self.proc = subprocess.Popen(
            bmv2_command(DEVICE_ID, {p: self._sw(p) for p in self.ports}, self.grpc_port,
                         self.thrift_port, n.PRIORITY_QUEUES, creds.directory),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._connect(json_path, creds.client)

    def _connect(self, json_path: Path, client: tls.ClientTls) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        self.channel = tls.channel(f"127.0.0.1:{self.grpc_port}", client)
        grpc.channel_ready_future(self.channel).result(timeout=max(1.0, deadline -
                                                                   time.monotonic()))
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self._stream = self.stub.StreamChannel(self._requests())
        self._stream_q.put(p4runtime_pb2.StreamMessageRequest(
            arbitration=p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID,
                                                              election_id=ELECTION_ID)))
        reply = next(self._stream)
        if reply.arbitration.status.code != 0:
            raise RuntimeError(f"not primary controller: {reply.arbitration.status}")
        config = p4runtime_pb2.ForwardingPipelineConfig(p4info=self.p4info,
                                                        p4_device_config=json_path.read_bytes())
        self.stub.SetForwardingPipelineConfig(p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=DEVICE_ID, election_id=ELECTION_ID, config=config,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT))

    def _requests(self) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        while True:
            item = self._stream_q.get()
            if item is None:
                return
            yield item

    def close(self) -> None:
        """Remove exactly what this harness created: its sockets, process and veths."""
        for sock in self.socks.values():
            sock.close()
        self.socks.clear()
        self._stream_q.put(None)
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.proc is not None:
            stop_process(self.proc, 5)
        self.proc = None
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], check=False, capture_output=True)
        self.links.clear()
        if self.shield is not None:
            shield.remove(self.shield)
            self.shield = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- per case ---------------------------------------------------------------------------
    def _write(self, kind: int, entities: list[p4runtime_pb2.Entity]) -> None:
        if entities:
            self.stub.Write(p4runtime_pb2.WriteRequest(
                device_id=DEVICE_ID, election_id=ELECTION_ID,
                updates=[p4runtime_pb2.Update(type=kind, entity=e) for e in entities]))

    def _entities(self, case: Case) -> tuple[list, list]:
        """(members and groups, table entries) of the case, encoded by the p4rt codec."""
        profile = [self.codec.encode(e) for e in case.entities if not isinstance(e, TableEntry)]
        tables = [self.codec.encode(e) for e in case.entities if isinstance(e, TableEntry)]
        return profile, tables

    def _preset_registers(self, case: Case) -> None:
        lines = [f"register_reset {n.QUEUE_DEPTH_REGISTER}"]
        for name, values in case.registers.items():
            lines += [f"register_write {name} {i} {v}" for i, v in sorted(values.items())]
        runtime_cli(self.thrift_port, lines, "golden corpus")

    def _counter(self, name: str, index: int) -> int:
        entry = p4runtime_pb2.CounterEntry(counter_id=self.codec.id(name),
                                           index=p4runtime_pb2.Index(index=index))
        request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID,
                                            entities=[p4runtime_pb2.Entity(counter_entry=entry)])
        for response in self.stub.Read(request):
            for entity in response.entities:
                return entity.counter_entry.data.packet_count
        raise RuntimeError(f"no counter entry {name}[{index}]")

    def _collect(self, expected: int) -> list[tuple[int, bytes]]:
        """Frames arriving on the host ends (outgoing copies of our own sends are skipped)."""
        got: list[tuple[int, bytes]] = []
        by_fd = {s.fileno(): (p, s) for p, s in self.socks.items()}
        deadline = time.monotonic() + 2.0
        while True:
            wait = (deadline if len(got) < expected else time.monotonic() + QUIET_S)
            timeout = wait - time.monotonic()
            if timeout <= 0:
                return got
            ready, _, _ = select.select(list(by_fd), [], [], timeout)
            if not ready:
                return got
            for fd in ready:
                port, sock = by_fd[fd]
                data, addr = sock.recvfrom(65535)
                if addr[2] != socket.PACKET_OUTGOING:
                    got.append((port, data))

    def _drain(self) -> None:
        for sock in self.socks.values():
            while select.select([sock], [], [], 0)[0]:
                sock.recv(65535)

    def run(self, case: Case) -> Observed:
        profiles, tables = self._entities(case)
        self._write(p4runtime_pb2.Update.INSERT, profiles)
        self._write(p4runtime_pb2.Update.INSERT, tables)
        try:
            self._preset_registers(case)
            self._drain()
            for pre in case.prelude:  # each must leave before the next: it sets queue state
                self.socks[pre.port].send(pre.frame)
                self._collect(1)
            wanted = {(name, i) for name, v in case.counters.items() for i in v}
            before = {k: self._counter(*k) for k in wanted}
            self._drain()
            self.socks[case.ingress_port].send(case.frame)
            outputs = self._collect(0 if case.drop_reason else 1)
            deltas: dict[str, dict[int, int]] = {}
            for name, i in wanted:
                deltas.setdefault(name, {})[i] = self._counter(name, i) - before[(name, i)]
        finally:
            self._write(p4runtime_pb2.Update.DELETE, tables[::-1])
            self._write(p4runtime_pb2.Update.DELETE, profiles[::-1])
        return Observed(outputs, deltas)


def check(case: Case, seen: Observed) -> list[str]:
    """Differences between what the case expects and what the switch did (empty = pass)."""
    problems = []
    expected = [(o.port, o.frame) for o in case.outputs]
    if case.drop_reason and seen.outputs:
        problems.append(f"expected a drop ({case.drop_reason}), got {len(seen.outputs)} frame(s)")
    elif case.one_of and (len(seen.outputs) != 1 or seen.outputs[0] not in expected):
        problems.append(f"expected one of ports {[p for p, _ in expected]}, got "
                        f"{[(p, f.hex()) for p, f in seen.outputs]}")
    elif not case.drop_reason and not case.one_of and sorted(seen.outputs) != sorted(expected):
        problems.append(f"expected {[(p, f.hex()) for p, f in expected]}, got "
                        f"{[(p, f.hex()) for p, f in seen.outputs]}")
    if seen.counter_deltas != case.counters:
        problems.append(f"counters: expected {case.counters}, got {seen.counter_deltas}")
    return problems
