"""Install the computed tables over P4Runtime: one primary session per switch, all switches at once.

Uses the generated stubs, not p4runtime-shell's client: that client exits the process when a
switch does not answer and sets no deadlines, and the controller must survive a dead switch
and report it by name. Every RPC carries a deadline; a switch that is down costs at most
`timeout` seconds and shows up as a failed SwitchResult.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.rpc import status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller import p4build
from controller.errors import ControllerError
from controller.tables import (
    PortThresholds,
    SwitchTables,
    diff,
    fabric_tables,
)
from fabric.topology import Fabric, Switch
from p4rt.codec import Codec, write_phases
from p4rt.entities import Entity, Update
from p4rt.p4info import P4InfoIndex, load_committed
from p4rt.tls import ClientTls, channel

log = logging.getLogger("controller.install")

REPO = Path(__file__).resolve().parent.parent
TARGETS = ("soft", "bmv2")
CONTROLLER_ELECTION_ID = (0, 100)  # p4runtime-sh backups use a lower one (controller.shell)
BATCH_SIZE = 128  # the software switch refuses more per Write (softswitch.limits); BMv2 takes any
DEFAULT_TIMEOUT = 5.0


class InstallError(ControllerError):
    """A switch refused or did not answer; the message names the switch and the gRPC status."""


def rpc_error_text(err: grpc.RpcError) -> str:
    """Status code, details and the first per-update errors of a batched Write."""
    if not isinstance(err, grpc.Call):
        return f"RPC error: {err}"
    text = f"{err.code().name}: {err.details()}"
    for key, value in err.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        problems = []
        for i, detail in enumerate(status_pb2.Status.FromString(value).details):
            error = p4runtime_pb2.Error()
            if detail.Unpack(error) and error.canonical_code != 0:
                problems.append(f"update {i}: {error.message}")
        if problems:
            text += " [" + "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else "") + "]"
    return text




def device_config(target: str) -> bytes:
    """The target-specific blob of SetForwardingPipelineConfig: BMv2 JSON, or nothing."""
    if target not in TARGETS:
        raise InstallError(f"unknown target {target!r}: use one of {', '.join(TARGETS)}")
    if target == "soft":
        return b""  # the software switch runs the pipeline the P4Info names
    try:
        json_path, _ = p4build.ensure_compiled(log=log.info)
    except p4build.CompileError as exc:
        raise InstallError(f"cannot build the BMv2 pipeline: {exc}") from exc
    return json_path.read_bytes()


class SwitchSession:
    """A StreamChannel on which this controller is primary, plus unary RPCs with deadlines."""

    def __init__(self, switch: Switch, address: str, timeout: float,
                 election_id: tuple[int, int] = CONTROLLER_ELECTION_ID,
                 tls: ClientTls | None = None) -> None:
        self.switch, self.timeout, self.election_id = switch, timeout, election_id
        self.channel = channel(address, tls)
        self._out: queue.Queue = queue.Queue()
        self._arbitration: queue.Queue = queue.Queue()
        self.primary = False
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self.channel.close()
            raise InstallError(f"{switch.name}: no P4Runtime server at {address} "
                               f"within {timeout:.1f}s") from None
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self._stream = self.stub.StreamChannel(iter(self._out.get, None))
        self._reader = threading.Thread(target=self._read_stream, daemon=True,
                                        name=f"p4rt-{switch.name}")
        self._reader.start()
        try:
            self._arbitrate()
        except InstallError:
            self.close()
            raise

    def _read_stream(self) -> None:
        try:
            for msg in self._stream:
                if msg.HasField("arbitration"):
                    self.primary = msg.arbitration.status.code == 0
                    self._arbitration.put(msg)
        except grpc.RpcError as err:
            self.primary = False
            self._arbitration.put(err)

    def _arbitrate(self) -> None:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.switch.device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = self.election_id
        self._out.put(req)
        try:
            reply = self._arbitration.get(timeout=self.timeout)
        except queue.Empty:
            raise InstallError(f"{self.switch.name}: no arbitration answer within "
                               f"{self.timeout:.1f}s") from None
        if isinstance(reply, grpc.RpcError):
            raise InstallError(f"{self.switch.name}: StreamChannel {rpc_error_text(reply)}")
        if not self.primary:
            raise InstallError(f"{self.switch.name}: not primary (another client has a higher "
                               f"election id than {self.election_id}): "
                               f"{reply.arbitration.status.message}")

    def _call(self, what: str, rpc, request):
        try:
            return rpc(request, timeout=self.timeout)
        except grpc.RpcError as err:
            raise InstallError(f"{self.switch.name}: {what} {rpc_error_text(err)}") from None

    def _fill(self, req) -> None:
        req.device_id = self.switch.device_id
        req.election_id.high, req.election_id.low = self.election_id

    def set_pipeline(self, p4info: p4info_pb2.P4Info, blob: bytes) -> None:
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest()
        self._fill(req)
        req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = blob
        self._call("SetForwardingPipelineConfig", self.stub.SetForwardingPipelineConfig, req)

    def write(self, codec: Codec, updates: list[Update]) -> None:
        for phase in write_phases(updates):
            for start in range(0, len(phase), BATCH_SIZE):
                req = p4runtime_pb2.WriteRequest()
                self._fill(req)
                req.updates.extend(codec.update(u.kind, u.entity)
                                   for u in phase[start:start + BATCH_SIZE])
                self._call("Write", self.stub.Write, req)

    def read(self, codec: Codec) -> set[Entity]:
        """Everything the switch holds: wildcard reads per table and per action profile."""
        req = p4runtime_pb2.ReadRequest(device_id=self.switch.device_id)
        for pid in codec.profile_ids:
            req.entities.add().action_profile_member.action_profile_id = pid
            req.entities.add().action_profile_group.action_profile_id = pid
        for tid in codec.table_ids:
            req.entities.add().table_entry.table_id = tid
        try:
            replies = list(self.stub.Read(req, timeout=self.timeout))
        except grpc.RpcError as err:
            raise InstallError(f"{self.switch.name}: Read {rpc_error_text(err)}") from None
        return {codec.decode(e) for r in replies for e in r.entities
                if not (e.HasField("table_entry") and e.table_entry.is_default_action)}

    def read_port_counters(self, counters: dict[int, str], ports: list[int]
                           ) -> dict[str, dict[int, int]]:
        """Packets in each of `ports`' cells of the indexed counters `counters` (id -> name),
        in one Read: only the cells asked for, not the program's 512 per counter."""
        req = p4runtime_pb2.ReadRequest(device_id=self.switch.device_id)
        for counter_id in counters:
            for port in ports:
                cell = req.entities.add().counter_entry
                cell.counter_id, cell.index.index = counter_id, port
        out = {name: dict.fromkeys(ports, 0) for name in counters.values()}
        try:
            replies = list(self.stub.Read(req, timeout=self.timeout))
        except grpc.RpcError as err:
            raise InstallError(f"{self.switch.name}: Read {rpc_error_text(err)}") from None
        for reply in replies:
            for entity in reply.entities:
                cell = entity.counter_entry
                cells = out.get(counters.get(cell.counter_id, ""))
                if cells is not None and cell.index.index in cells:
                    cells[cell.index.index] = cell.data.packet_count
        return out

    def close(self) -> None:
        self._out.put(None)
        self._stream.cancel()
        self.channel.close()


@dataclass(frozen=True)
class SwitchResult:
    name: str
    ok: bool
    entities: int
    seconds: float
    error: str = ""


def compare(expected: SwitchTables, found: set[Entity]) -> str:
    """'' when the switch holds exactly the expected entities, else what differs."""
    want = set(expected.entities())
    missing, extra = want - found, found - want
    if not missing and not extra:
        return ""
    sample = next(iter(missing or extra))
    return (f"{expected.switch.name}: read-back differs: {len(missing)} missing, "
            f"{len(extra)} unexpected (e.g. {sample})")


class Controller:
    """Keeps one primary session per switch and the tables each switch currently holds."""

    def __init__(self, fabric: Fabric, target: str = "soft", timeout: float = DEFAULT_TIMEOUT,
                 thresholds: PortThresholds | None = None,
                 election_id: tuple[int, int] = CONTROLLER_ELECTION_ID,
                 addresses: dict[str, str] | None = None, tls: ClientTls | None = None) -> None:
        """`addresses` overrides the topology's gRPC address per switch (tests use free ports);
        `tls`: the run's client credentials (a testbed fabric's switches want them)."""
        if timeout <= 0:
            raise InstallError(f"timeout must be positive, got {timeout}")
        self.fabric, self.timeout, self.election_id = fabric, timeout, election_id
        self.thresholds, self.tls = thresholds, tls
        self.blob = device_config(target)
        self.p4info = load_committed()
        self.codec = Codec(P4InfoIndex.build(self.p4info))
        self.current: dict[str, SwitchTables] = fabric_tables(fabric, thresholds=thresholds)
        self.sessions: dict[str, SwitchSession] = {}
        self._locks = {name: threading.Lock() for name in self.current}
        self.addresses = {s.name: s.grpc_address for s in fabric.switches}
        self.addresses.update(addresses or {})

    def _switch(self, name: str) -> Switch:
        if name not in self.fabric.by_name:
            raise InstallError(f"no switch {name!r} in {self.fabric}: names look like "
                               f"{self.fabric.switches[0].name}")
        return self.fabric.by_name[name]

    def install(self, name: str) -> SwitchResult:
        """(Re)connect, push the pipeline, write the switch's tables and verify by reading back.

        Also the reboot path: a restarted switch gets the same static configuration.
        """
        start = time.monotonic()
        switch = self._switch(name)
        with self._locks[name]:
            error = ""
            # A live session is reused (a second stream with our election id would be
            # refused); one that turns out dead gets a single fresh retry.
            live = name in self.sessions and self.sessions[name].primary
            for fresh in (False, True) if live else (True,):
                try:
                    session = self._session(switch, fresh)
                    session.set_pipeline(self.p4info, self.blob)
                    tables = self.current[name]
                    session.write(self.codec, [Update("INSERT", e) for e in tables.entities()])
                    error = compare(tables, session.read(self.codec))
                    break
                except InstallError as err:
                    error = str(err)
            return SwitchResult(name, not error, len(self.current[name].entities()),
                                time.monotonic() - start, error)

    def _session(self, switch: Switch, fresh: bool) -> SwitchSession:
        old = self.sessions.get(switch.name)
        if old is not None and old.primary and not fresh:
            return old
        if old is not None:
            del self.sessions[switch.name]
            old.close()
        session = SwitchSession(switch, self.addresses[switch.name], self.timeout,
                                self.election_id, self.tls)
        self.sessions[switch.name] = session
        return session

    def move(self, name: str, address: str) -> None:
        """Switch `name` serves P4Runtime at `address` now (a rebooted switch moved off a port
        someone else took: safety.runports); its old session is closed, and the next
        install connects there."""
        self._switch(name)
        with self._locks[name]:
            old = self.sessions.pop(name, None)
            if old is not None:
                old.close()
            self.addresses[name] = address

    def install_all(self, names: list[str] | None = None, workers: int = 16) -> list[SwitchResult]:
        names = list(self.current) if names is None else names
        for name in names:
            self._switch(name)
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as pool:
            return list(pool.map(self.install, names))

    def apply(self, name: str, new: SwitchTables) -> list[Update]:
        """Move a switch to `new` with the fewest writes; the session must be open."""
        with self._locks[name]:
            session = self.sessions.get(name)
            if session is None:
                raise InstallError(f"{name}: not connected; install it first")
            updates = diff(self.current[name], new)
            # The target state is recorded even if the write fails: the switch is then
            # presumably down, and its reinstall must write the tables it should have.
            self.current[name] = new
            session.write(self.codec, updates)
            return updates

    def verify(self, name: str) -> str:
        with self._locks[name]:
            session = self.sessions.get(name)
            if session is None:
                return f"{name}: not connected"
            try:
                return compare(self.current[name], session.read(self.codec))
            except InstallError as err:
                return str(err)

    def port_counters(self, name: str, counters: tuple[str, ...], ports: list[int]
                      ) -> dict[str, dict[int, int]]:
        """Counter name -> port -> packets of switch `name`'s indexed per-port counters
        (trims, ECN marks: p4rt.names), for the run view (views.runview)."""
        session = self.sessions.get(name)
        if session is None:
            raise InstallError(f"{name}: not connected; install it first")
        ids = {self.codec.index.id_of(c): c for c in counters}
        return session.read_port_counters(ids, ports)

    def read(self, name: str) -> set[Entity]:
        session = self.sessions.get(name)
        if session is None:
            raise InstallError(f"{name}: not connected; install it first")
        return session.read(self.codec)

    def close(self) -> None:
        """Close every session. An interrupted install_all may still be opening sessions in
        its threads, so each is taken out of the dict before it is closed (CI saw iterating
        the dict raise 'changed size during iteration' on Ctrl-C during the install)."""
        while self.sessions:
            try:
                _, session = self.sessions.popitem()
            except KeyError:  # emptied by a racing thread between the test and the pop
                break
            session.close()
