"""Mininet switch node running BMv2 simple_switch_grpc for the MRC P4 program.

The switch starts without a pipeline (--no-p4); the controller pushes mrc.json + P4Info
over P4Runtime on 127.0.0.1:(GRPC_BASE_PORT + device_id). The Thrift runtime CLI on
THRIFT_BASE_PORT + device_id emulates link speed and buffer size (set_queue_rate /
set_queue_depth): BMv2's own queues, not the veth, must be the bottleneck, otherwise the
program never sees a queue to trim on. The software switch node mirrors this interface.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

from mininet.node import Switch

from controller.p4names import PRIORITY_QUEUES
from controller.topology import GRPC_BASE_PORT, THRIFT_BASE_PORT

SWITCH_BINARY = "simple_switch_grpc"
CLI_BINARY = "simple_switch_CLI"
MAX_PRIORITY_QUEUES = 8  # standard_metadata.priority is 3 bits
START_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 10.0


class Bmv2Error(RuntimeError):
    """simple_switch_grpc failed to start, or the runtime CLI rejected a command."""


def bmv2_command(device_id: int, ports: dict[int, str], grpc_port: int, thrift_port: int,
                 priority_queues: int = PRIORITY_QUEUES) -> list[str]:
    """argv for simple_switch_grpc; ports maps BMv2 port number -> interface name."""
    if device_id < 1:
        raise ValueError(f"device_id must be a positive integer, got {device_id}")
    for label, port in (("grpc_port", grpc_port), ("thrift_port", thrift_port)):
        if not 1 <= port <= 65535:
            raise ValueError(f"{label} must be 1..65535, got {port}")
    if not PRIORITY_QUEUES <= priority_queues <= MAX_PRIORITY_QUEUES:
        raise ValueError(f"priority_queues must be {PRIORITY_QUEUES}..{MAX_PRIORITY_QUEUES} "
                         f"(mrc.p4 uses priority {PRIORITY_QUEUES - 1}), got {priority_queues}")
    cmd = [SWITCH_BINARY, "--device-id", str(device_id), "--thrift-port", str(thrift_port)]
    for number, ifname in sorted(ports.items()):
        cmd += ["-i", f"{number}@{ifname}"]
    return cmd + ["--no-p4", "--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
                  "--priority-queues", str(priority_queues)]


class Bmv2Switch(Switch):
    """A BMv2 simple_switch_grpc process as a Mininet switch (root namespace).

    Constructor keyword arguments (besides Mininet's name/params):
      device_id (int, required, unique per switch: controller.topology.Switch.device_id)
      grpc_port (int, default GRPC_BASE_PORT + device_id), bound to 127.0.0.1
      thrift_port (int, default THRIFT_BASE_PORT + device_id)
      priority_queues (int, default controller.p4names.PRIORITY_QUEUES)
      log_path (str | None): file for the switch's stdout/stderr (default: discarded)
      start_timeout (float seconds, default 30): how long start() waits for gRPC
    Public interface:
      start(controllers) / stop(deleteIntfs=True)  - Mininet lifecycle; stop kills our PID
      grpc_address -> "127.0.0.1:<port>"; switch_pid -> int | None (Mininet owns `pid`: its shell)
      set_queue_rate(pps, port=None), set_queue_depth(packets, port=None)
      cli(commands) -> str: raw runtime CLI access
    """

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
        bmv2_command(device_id, {}, self.grpc_port, self.thrift_port, priority_queues)

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def switch_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _data_ports(self) -> dict[int, str]:
        return {port: intf.name for intf, port in self.ports.items() if intf.name != "lo"}

    def start(self, controllers) -> None:
        """Launch simple_switch_grpc and wait until its gRPC port accepts connections."""
        if shutil.which(SWITCH_BINARY) is None:
            raise Bmv2Error(f"{SWITCH_BINARY} not on PATH: install p4lang-bmv2 "
                            "(see p4src/build.sh)")
        cmd = bmv2_command(self.device_id, self._data_ports(), self.grpc_port,
                           self.thrift_port, self.priority_queues)
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        finally:
            if self.log_path:
                out.close()
        deadline = time.monotonic() + self.start_timeout
        while not self._grpc_listening():
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise Bmv2Error(f"{self.name}: {SWITCH_BINARY} exited with {code} "
                                f"(log: {self.log_path or 'not kept; pass log_path'})")
            if time.monotonic() > deadline:
                self.stop(deleteIntfs=False)
                raise Bmv2Error(f"{self.name}: no gRPC on {self.grpc_address} after "
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
        """Run runtime CLI commands over Thrift; raises Bmv2Error if any is rejected."""
        try:
            result = subprocess.run([CLI_BINARY, "--thrift-port", str(self.thrift_port)],
                                    input="\n".join(commands) + "\n", capture_output=True,
                                    text=True, timeout=CLI_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Bmv2Error(f"{self.name}: {CLI_BINARY} failed: {exc}") from exc
        if result.returncode != 0 or "Error" in result.stdout or "Invalid" in result.stdout:
            raise Bmv2Error(f"{self.name}: CLI rejected {commands}: {result.stdout.strip()} "
                            f"{result.stderr.strip()}")
        return result.stdout

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

