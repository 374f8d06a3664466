"""Mininet switch node running BMv2 simple_switch_grpc for the MRC P4 program.

The switch starts without a pipeline (--no-p4); the controller pushes mrc.json + P4Info
over P4Runtime on 127.0.0.1:(GRPC_BASE_PORT + device_id). The Thrift runtime CLI on
THRIFT_BASE_PORT + device_id emulates link speed and buffer size (set_queue_rate /
set_queue_depth): BMv2's own queues, not the veth, must be the bottleneck, otherwise the
program never sees a queue to trim on. Lifecycle and queue methods: nodes.p4switch.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

from nodes.p4switch import P4RuntimeSwitch, SwitchProcessError, check_switch_args
from p4rt import tls
from p4rt.names import PRIORITY_QUEUES

SWITCH_BINARY = "simple_switch_grpc"
CLI_BINARY = "simple_switch_CLI"
CLI_TIMEOUT_S = 10.0
# BMv2's default log level is 'trace': on builds with logging compiled in (the usual ones),
# every packet's trace messages are formatted even with no log sink.
LOG_LEVEL = "warn"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian/Ubuntu's, where python3-thrift installs `thrift`

Bmv2Error = SwitchProcessError


def bmv2_command(device_id: int, ports: dict[int, str], grpc_port: int, thrift_port: int,
                 priority_queues: int = PRIORITY_QUEUES, tls_dir: Path | None = None
                 ) -> list[str]:
    """argv for simple_switch_grpc; ports maps BMv2 port number -> interface name; with
    `tls_dir`, P4Runtime over mutual TLS with the run's keys (p4rt.tls)."""
    check_switch_args(device_id, grpc_port, thrift_port, priority_queues)
    cmd = [SWITCH_BINARY, "--device-id", str(device_id), "--thrift-port", str(thrift_port),
           "--log-level", LOG_LEVEL]
    for number, ifname in sorted(ports.items()):
        cmd += ["-i", f"{number}@{ifname}"]
    return cmd + ["--no-p4", "--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
                  "--priority-queues", str(priority_queues),
                  *(tls.server_flags(tls_dir) if tls_dir else [])]


def _has_thrift(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "import thrift"], capture_output=True,
                              timeout=CLI_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.lru_cache(maxsize=1)
def runtime_cli_argv() -> tuple[str, ...]:
    """How to start simple_switch_CLI so that it finds `thrift`.

    The CLI is a Python script starting with `#!/usr/bin/env python3` in most installs, so
    it runs with whatever python3 is first on PATH (often a pyenv one without thrift). Run
    it with this process's interpreter when that has thrift (the project venv sees
    Debian's python3-thrift), else with the system Python.
    """
    path = shutil.which(CLI_BINARY)
    if path is None:
        raise Bmv2Error(f"{CLI_BINARY} not on PATH: install BMv2 with scripts/install-p4lang.sh")
    with open(path, "rb") as f:
        first = f.readline()
    if not (first.startswith(b"#!") and b"python" in first):
        return (path,)  # a compiled or shell wrapper: it knows its own interpreter
    for python in (sys.executable, SYSTEM_PYTHON):
        if Path(python).exists() and _has_thrift(python):
            return (python, path)
    raise Bmv2Error(f"{CLI_BINARY} needs the Python module 'thrift', which neither "
                    f"{sys.executable} nor {SYSTEM_PYTHON} has: install python3-thrift "
                    "(apt) or `pip install thrift` into the project venv")


def runtime_cli(thrift_port: int, commands: list[str], who: str = "bmv2") -> str:
    """Run BMv2 runtime CLI commands over Thrift; raises Bmv2Error if any is rejected."""
    try:
        result = subprocess.run([*runtime_cli_argv(), "--thrift-port", str(thrift_port)],
                                input="\n".join(commands) + "\n", capture_output=True,
                                text=True, timeout=CLI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Bmv2Error(f"{who}: {CLI_BINARY} failed: {exc}") from exc
    if result.returncode != 0 or "Error" in result.stdout or "Invalid" in result.stdout:
        raise Bmv2Error(f"{who}: CLI rejected {commands}: {result.stdout.strip()} "
                        f"{result.stderr.strip()}")
    return result.stdout


class Bmv2Switch(P4RuntimeSwitch):
    """A BMv2 simple_switch_grpc process as a Mininet switch; kwargs in P4RuntimeSwitch."""

    process_name = SWITCH_BINARY

    def command(self, ports: dict[int, str]) -> list[str]:
        if shutil.which(SWITCH_BINARY) is None:
            raise Bmv2Error(f"{SWITCH_BINARY} not on PATH: install BMv2 with "
                            "scripts/install-p4lang.sh")
        return bmv2_command(self.device_id, ports, self.grpc_port, self.thrift_port,
                            self.priority_queues,
                            self.credentials.directory if self.credentials else None)

    def cli(self, commands: list[str]) -> str:
        """Run runtime CLI commands over Thrift; raises Bmv2Error if any is rejected."""
        return runtime_cli(self.thrift_port, commands, self.name)
