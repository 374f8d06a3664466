"""Mininet switch node running BMv2 simple_switch_grpc for the MRC P4 program.

The switch starts without a pipeline (--no-p4); the controller pushes mrc.json + P4Info
over P4Runtime on 127.0.0.1:(GRPC_BASE_PORT + device_id). The Thrift runtime CLI on
THRIFT_BASE_PORT + device_id emulates link speed and buffer size (set_queue_rate /
set_queue_depth): BMv2's own queues, not the veth, must be the bottleneck, otherwise the
program never sees a queue to trim on. Lifecycle and queue methods: topologies.p4switch.
"""

from __future__ import annotations

import shutil
import subprocess

from controller.p4names import PRIORITY_QUEUES
from topologies.p4switch import P4RuntimeSwitch, SwitchProcessError, check_switch_args

SWITCH_BINARY = "simple_switch_grpc"
CLI_BINARY = "simple_switch_CLI"
CLI_TIMEOUT_S = 10.0

Bmv2Error = SwitchProcessError


def bmv2_command(device_id: int, ports: dict[int, str], grpc_port: int, thrift_port: int,
                 priority_queues: int = PRIORITY_QUEUES) -> list[str]:
    """argv for simple_switch_grpc; ports maps BMv2 port number -> interface name."""
    check_switch_args(device_id, grpc_port, thrift_port, priority_queues)
    cmd = [SWITCH_BINARY, "--device-id", str(device_id), "--thrift-port", str(thrift_port)]
    for number, ifname in sorted(ports.items()):
        cmd += ["-i", f"{number}@{ifname}"]
    return cmd + ["--no-p4", "--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
                  "--priority-queues", str(priority_queues)]


class Bmv2Switch(P4RuntimeSwitch):
    """A BMv2 simple_switch_grpc process as a Mininet switch; kwargs in P4RuntimeSwitch."""

    process_name = SWITCH_BINARY

    def command(self, ports: dict[int, str]) -> list[str]:
        if shutil.which(SWITCH_BINARY) is None:
            raise Bmv2Error(f"{SWITCH_BINARY} not on PATH: install p4lang-bmv2 "
                            "(see p4src/build.sh)")
        return bmv2_command(self.device_id, ports, self.grpc_port, self.thrift_port,
                            self.priority_queues)

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
