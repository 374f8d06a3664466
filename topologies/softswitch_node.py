"""Mininet switch node running the software data plane (`python -m softswitch`).

Same constructor keywords and public methods as topologies.bmv2_switch.Bmv2Switch (both
are topologies.p4switch.P4RuntimeSwitch), so a topology does not care which one it runs:
P4Runtime on 127.0.0.1:(GRPC_BASE_PORT + device_id), runtime control (set_queue_rate /
set_queue_depth) on THRIFT_BASE_PORT + device_id, which here is the softswitch's JSON
control socket instead of Thrift.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from p4rt import tls
from p4rt.names import PRIORITY_QUEUES
from softswitch.cli import ControlError, parse_command, request
from topologies.credentials import RunCredentials
from topologies.p4switch import P4RuntimeSwitch, SwitchProcessError, check_switch_args

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
    if credentials is not None:
        cmd += [*tls.server_flags(credentials.directory),
                "--control-token-file", str(credentials.token_file)]
    return cmd


class SoftSwitch(P4RuntimeSwitch):
    """A softswitch process as a Mininet switch; kwargs in P4RuntimeSwitch."""

    process_name = "softswitch"

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
