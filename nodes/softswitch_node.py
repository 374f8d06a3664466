"""Mininet switch node running the software data plane (`python -m softswitch`).

Same constructor keywords and public methods as nodes.bmv2_switch.Bmv2Switch (both
are nodes.p4switch.P4RuntimeSwitch), so a topology does not care which one it runs:
P4Runtime on 127.0.0.1:(GRPC_BASE_PORT + device_id), runtime control (set_queue_rate /
set_queue_depth) on THRIFT_BASE_PORT + device_id, which here is the softswitch's JSON
control socket instead of Thrift.

Given a SoftSwitchProcess, a node does not start a process of its own: the group's one
`python -m softswitch --switch ...` serves all its members once the last has started, and
stopping any member stops that process (docs/decisions.md, "Many software switches per
process"). A member crashes and reboots inside its process (`detach`, `attach`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from nodes.p4switch import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    P4RuntimeSwitch,
    SwitchProcessError,
    await_listening,
    check_switch_args,
)
from p4rt import tls
from p4rt.names import PRIORITY_QUEUES
from safety.credentials import RunCredentials
from safety.procs import stop_process
from softswitch.cli import ControlError, parse_command, request

REPO = Path(__file__).resolve().parent.parent

SoftSwitchError = SwitchProcessError


def softswitch_command(device_id: int, ports: dict[int, str], grpc_port: int, thrift_port: int,
                       priority_queues: int = PRIORITY_QUEUES, log_level: str = "warn",
                       credentials: RunCredentials | None = None) -> list[str]:
    """argv for the software switch, in simple_switch_grpc's shape; with the run's
    `credentials`, mutual TLS on P4Runtime and the run's token on the runtime port."""
    check_switch_args(device_id, grpc_port, thrift_port, priority_queues)
    cmd = [sys.executable, "-m", "softswitch", "--device-id", str(device_id),
           "--thrift-port", str(thrift_port)]
    for number, ifname in sorted(ports.items()):
        cmd += ["-i", f"{number}@{ifname}"]
    cmd += ["--no-p4", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
            "--priority-queues", str(priority_queues), "--log-level", log_level]
    return cmd + _tls_flags(credentials)


def _tls_flags(credentials: RunCredentials | None) -> list[str]:
    if credentials is None:
        return []
    return [*tls.server_flags(credentials.directory),
            "--control-token-file", str(credentials.token_file)]


def group_command(members: dict[int, tuple[int, int, dict[int, str]]],
                  priority_queues: int = PRIORITY_QUEUES, log_level: str = "warn",
                  credentials: RunCredentials | None = None) -> list[str]:
    """argv of one process serving many switches: {device_id: (grpc_port, control_port,
    ports)}."""
    cmd = [sys.executable, "-m", "softswitch"]
    for device_id, (grpc_port, control_port, ports) in sorted(members.items()):
        check_switch_args(device_id, grpc_port, control_port, priority_queues)
        interfaces = ",".join(f"{n}@{name}" for n, name in sorted(ports.items()))
        cmd += ["--switch", f"{device_id}:{grpc_port}:{control_port}:{interfaces}"]
    return [*cmd, "--no-p4", "--priority-queues", str(priority_queues),
            "--log-level", log_level, *_tls_flags(credentials)]


class SoftSwitchProcess:
    """One software-switch process for several SoftSwitch nodes (pass it as the nodes'
    `switch_process`): started when the last member starts, stopped with the first."""

    def __init__(self, label: str, log_path: str | None = None,
                 credentials: RunCredentials | None = None,
                 start_timeout: float = START_TIMEOUT_S) -> None:
        self.label, self.log_path, self.credentials = label, log_path, credentials
        self.start_timeout = start_timeout
        self.members: list[SoftSwitch] = []
        self.ready: dict[str, dict[int, str]] = {}
        self.proc: subprocess.Popen | None = None  # or a RemoteProcess: Popen's interface

    def add(self, node: SoftSwitch) -> None:
        self.members.append(node)

    def remove(self, node: SoftSwitch) -> None:
        self.members.remove(node)
        self.ready.pop(node.name, None)

    def member_started(self, node: SoftSwitch, ports: dict[int, str]) -> None:
        """Launch the process once every member has its ports (without waiting for it:
        wait_ready, which Mininet's batchStartup calls, so processes start side by side)."""
        self.ready[node.name] = ports
        if self.proc is None and len(self.ready) == len(self.members):
            first = self.members[0]
            cmd = group_command({m.device_id: (m.grpc_port, m.thrift_port, self.ready[m.name])
                                 for m in self.members}, first.priority_queues,
                                "info" if self.log_path else "warn", self.credentials)
            self.proc = first.launch(cmd, self.log_path, first.process_env())
            for m in self.members:
                m.proc = self.proc

    def wait_ready(self) -> None:
        """The process listens on every member's ports (else stop it and raise)."""
        if self.proc is None:
            raise SwitchProcessError(f"softswitch process {self.label} was not started: "
                                     f"{len(self.ready)} of {len(self.members)} members ready")
        try:
            await_listening(self.proc, self.members, self.start_timeout,
                            f"softswitch process {self.label}")
        except SwitchProcessError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, STOP_TIMEOUT_S)
        self.proc = None
        self.ready.clear()
        for m in self.members:
            m.proc = None


class SoftSwitch(P4RuntimeSwitch):
    """A softswitch process as a Mininet switch; kwargs in P4RuntimeSwitch, plus
    switch_process (SoftSwitchProcess | None): the process this switch shares."""

    process_name = "softswitch"

    def __init__(self, name: str, device_id: int,
                 switch_process: SoftSwitchProcess | None = None, **params) -> None:
        super().__init__(name, device_id, **params)
        self.switch_process = switch_process
        if switch_process is not None:
            switch_process.add(self)

    def start(self, controllers) -> None:
        if self.switch_process is None:
            super().start(controllers)
            return
        ports = self._data_ports()
        for ifname in ports.values():
            self.silence_port(ifname)
        self.switch_process.member_started(self, ports)

    @classmethod
    def batchStartup(cls, switches: tuple[SoftSwitch, ...]) -> tuple[SoftSwitch, ...]:  # noqa: N802
        """Mininet's hook after every start(): wait for the shared processes, all launched
        by now, and any process of a switch of its own started with batch_start."""
        groups = {id(s.switch_process): s.switch_process for s in switches
                  if s.switch_process is not None}
        for group in groups.values():
            group.wait_ready()
        return super().batchStartup(switches)

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        if self.switch_process is not None:
            self.switch_process.stop()
        super().stop(deleteIntfs)

    def crash(self) -> None:
        """One switch dies, not its process: a member goes down (its ports closed, its tables
        gone, its P4Runtime requests refused); the process's other switches forward on."""
        if self._shared():
            if not self.is_down():
                self.cli(["detach"])
                self._await_down(True)
        else:
            super().crash()

    def reboot(self) -> None:
        """A member crashes (as in crash()) and comes back in its process on the same ports
        with empty tables; a member whose process is gone starts a process of its own."""
        if self.switch_process is not None and not self._shared():
            self.switch_process.remove(self)  # its process is gone: start one of our own
            self.switch_process, self.proc = None, None
        if self.switch_process is None:
            super().reboot()
            return
        self.crash()
        self.cli(["attach"])
        self._await_down(False)

    def _shared(self) -> bool:
        group = self.switch_process
        return group is not None and group.proc is not None and group.proc.poll() is None

    def is_down(self) -> bool:
        if not self._shared():
            return super().is_down()
        token = self.credentials.control_token if self.credentials else None
        return bool(request(self.thrift_port, {"cmd": "stats"}, token=token).get("down"))

    def _await_down(self, down: bool) -> None:
        """The process replies to detach before it acts (its control port stays open)."""
        deadline = time.monotonic() + STOP_TIMEOUT_S
        last: str = "it answered"
        while True:
            try:
                if self.is_down() == down:
                    return
            except ControlError as err:  # e.g. the process is busy closing the ports
                last = str(err)
            if time.monotonic() > deadline:
                state = "down" if down else "up"
                raise SoftSwitchError(f"{self.name}: not {state} {STOP_TIMEOUT_S:.0f} s after "
                                      f"the command (last: {last})")
            time.sleep(0.02)

    def command(self, ports: dict[int, str]) -> list[str]:
        return softswitch_command(self.device_id, ports, self.grpc_port, self.thrift_port,
                                  self.priority_queues, "info" if self.log_path else "warn",
                                  self.credentials)

    def process_env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=str(REPO))

    def cli(self, commands: list[str]) -> str:
        """Run BMv2-syntax runtime commands; raises SoftSwitchError if any is rejected."""
        replies = []
        for line in commands:
            try:
                token = self.credentials.control_token if self.credentials else None
                replies.append(str(request(self.thrift_port, parse_command(line.split()),
                                           token=token)))
            except (ValueError, ControlError) as exc:
                raise SoftSwitchError(f"{self.name}: {exc}") from exc
        return "\n".join(replies)
