"""Mininet switch node running the software data plane (`python -m softswitch`).

Same constructor keywords and public methods as topologies.bmv2_switch.Bmv2Switch, so a
topology does not care which one it runs: P4Runtime on 127.0.0.1:(GRPC_BASE_PORT +
device_id), runtime control (set_queue_rate / set_queue_depth) on THRIFT_BASE_PORT +
device_id, which here is the softswitch's JSON control socket instead of Thrift.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from mininet.node import Switch

from controller.p4names import PRIORITY_QUEUES
from controller.topology import GRPC_BASE_PORT, THRIFT_BASE_PORT
from softswitch.cli import ControlError, parse_command, request

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30.0
MAX_PRIORITY_QUEUES = 8


class SoftSwitchError(RuntimeError):
    """The softswitch process failed to start, or refused a runtime command."""


def softswitch_command(device_id: int, ports: dict[int, str], grpc_port: int, thrift_port: int,
                       priority_queues: int = PRIORITY_QUEUES, log_level: str = "warn"
                       ) -> list[str]:
    """argv for the software switch, in simple_switch_grpc's shape."""
    if device_id < 1:
        raise ValueError(f"device_id must be a positive integer, got {device_id}")
    for label, port in (("grpc_port", grpc_port), ("thrift_port", thrift_port)):
        if not 1 <= port <= 65535:
            raise ValueError(f"{label} must be 1..65535, got {port}")
    if not PRIORITY_QUEUES <= priority_queues <= MAX_PRIORITY_QUEUES:
        raise ValueError(f"priority_queues must be {PRIORITY_QUEUES}..{MAX_PRIORITY_QUEUES}, "
                         f"got {priority_queues}")
    cmd = [sys.executable, "-m", "softswitch", "--device-id", str(device_id),
           "--thrift-port", str(thrift_port)]
    for number, ifname in sorted(ports.items()):
        cmd += ["-i", f"{number}@{ifname}"]
    return cmd + ["--no-p4", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
                  "--priority-queues", str(priority_queues), "--log-level", log_level]


class SoftSwitch(Switch):
    """A softswitch process as a Mininet switch (root namespace); see Bmv2Switch for kwargs."""

    def __init__(self, name: str, device_id: int, grpc_port: int | None = None,
                 thrift_port: int | None = None, priority_queues: int = PRIORITY_QUEUES,
                 log_path: str | None = None, start_timeout: float = START_TIMEOUT_S,
                 **params) -> None:
        params.setdefault("dpid", f"{device_id:x}")
        super().__init__(name, **params)
        self.device_id = device_id
        self.grpc_port = GRPC_BASE_PORT + device_id if grpc_port is None else grpc_port
        self.thrift_port = THRIFT_BASE_PORT + device_id if thrift_port is None else thrift_port
        self.priority_queues = priority_queues
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        softswitch_command(device_id, {}, self.grpc_port, self.thrift_port, priority_queues)

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def switch_pid(self) -> int | None:
        """PID of the softswitch process (Mininet's own `pid` is the node's shell)."""
        return self.proc.pid if self.proc is not None else None

    def _data_ports(self) -> dict[int, str]:
        return {port: intf.name for intf, port in self.ports.items() if intf.name != "lo"}

    def start(self, controllers) -> None:
        """Launch the softswitch and wait until its gRPC port accepts connections."""
        cmd = softswitch_command(self.device_id, self._data_ports(), self.grpc_port,
                                 self.thrift_port, self.priority_queues,
                                 "info" if self.log_path else "warn")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=REPO)
        finally:
            if self.log_path:
                out.close()
        deadline = time.monotonic() + self.start_timeout
        while not self._grpc_listening():
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise SoftSwitchError(f"{self.name}: softswitch exited with {code} "
                                      f"(log: {self.log_path or 'not kept; pass log_path'})")
            if time.monotonic() > deadline:
                self.stop(deleteIntfs=False)
                raise SoftSwitchError(f"{self.name}: no gRPC on {self.grpc_address} after "
                                      f"{self.start_timeout:.0f} s")
            time.sleep(0.1)

    def _grpc_listening(self) -> bool:
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", self.grpc_port)) == 0

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        """Terminate our own process (by PID), then let Mininet remove the interfaces."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
            self.proc = None
        super().stop(deleteIntfs)

    def cli(self, commands: list[str]) -> str:
        """Run BMv2-syntax runtime commands; raises SoftSwitchError if any is rejected."""
        replies = []
        for line in commands:
            try:
                replies.append(str(request(self.thrift_port, parse_command(line.split()))))
            except (ValueError, ControlError) as exc:
                raise SoftSwitchError(f"{self.name}: {exc}") from exc
        return "\n".join(replies)

    def set_queue_rate(self, pps: int, port: int | None = None) -> None:
        """Egress rate in packets/s (all ports, or one); emulates the link speed."""
        if pps < 1:
            raise ValueError(f"queue rate must be at least 1 packet/s, got {pps}")
        self.cli([f"set_queue_rate {pps}" + ("" if port is None else f" {port}")])

    def set_queue_depth(self, packets: int, port: int | None = None) -> None:
        """Egress buffer size in packets (all ports, or one)."""
        if packets < 1:
            raise ValueError(f"queue depth must be at least 1 packet, got {packets}")
        self.cli([f"set_queue_depth {packets}" + ("" if port is None else f" {port}")])
