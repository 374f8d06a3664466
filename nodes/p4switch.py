"""What every P4Runtime switch node has in common, whatever process runs the pipeline.

A topology must not care whether BMv2 or the software data plane sits behind a switch
node, so both node classes share this base: one process per switch in the root namespace,
P4Runtime on 127.0.0.1:(GRPC_BASE_PORT + device_id), a runtime control port on
THRIFT_BASE_PORT + device_id for queue rate/depth (a run gives other ports where another user
holds those: safety.runports), stopped by its own PID. It is ready once its process
listens on both ports, the sockets checked to be the process's own (safety.listeners).

Given the run's credentials (safety.credentials), P4Runtime is served over mutual TLS and
the software switch's runtime port wants the run's token; BMv2's Thrift port cannot be bound
to loopback or given a secret, so the run shields it (safety.shield).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from mininet.node import Switch

from fabric.topology import GRPC_BASE_PORT, THRIFT_BASE_PORT
from nodes.errors import NodeError
from p4rt.names import PRIORITY_QUEUES
from safety import listeners
from safety.credentials import RunCredentials
from safety.procs import stop_process

MAX_PRIORITY_QUEUES = 8  # standard_metadata.priority is 3 bits
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


class SwitchProcessError(NodeError, RuntimeError):
    """The switch process failed to start, or its runtime control refused a command."""


def check_switch_args(device_id: int, grpc_port: int, thrift_port: int,
                      priority_queues: int) -> None:
    if device_id < 1:
        raise ValueError(f"device_id must be a positive integer, got {device_id}")
    for label, port in (("grpc_port", grpc_port), ("thrift_port", thrift_port)):
        if not 1 <= port <= 65535:
            raise ValueError(f"{label} must be 1..65535, got {port}")
    if not PRIORITY_QUEUES <= priority_queues <= MAX_PRIORITY_QUEUES:
        raise ValueError(f"priority_queues must be {PRIORITY_QUEUES}..{MAX_PRIORITY_QUEUES} "
                         f"(mrc.p4 uses priority {PRIORITY_QUEUES - 1}), got {priority_queues}")


def silence_kernel_ipv6(ifname: str) -> None:
    """A switch port belongs to the switch process: the root namespace's kernel must not
    send its own MLD reports and router solicitations out of it, nor answer frames on it."""
    path = f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write("1")
    except OSError as exc:
        raise SwitchProcessError(f"cannot disable IPv6 on switch port {ifname} "
                                 f"({path}): {exc}") from exc


def launch(cmd: list[str], log_path: str | None, env: dict[str, str] | None) -> subprocess.Popen:
    """Start a switch process, its output appended to `log_path` (or discarded)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    finally:
        if log_path:
            out.close()


def await_listening(proc: subprocess.Popen, nodes: list[P4RuntimeSwitch], timeout: float,
                    what: str) -> None:
    """Wait until `proc` listens on every node's P4Runtime and runtime ports (the socket
    inodes say so: safety.listeners; connecting would be answered by any listener);
    raise if `proc` exits, another listener holds one of the ports, or the time runs out
    (the caller stops the process)."""
    deadline = time.monotonic() + timeout
    waiting = list(nodes)
    while waiting:
        probe = listeners.Snapshot()
        try:
            waiting = [n for n in waiting if not n.listening(probe)]
        except listeners.ForeignListener as exc:
            raise SwitchProcessError(f"{waiting[0].name}: {what}: {exc}") from exc
        if not waiting:
            return
        if proc.poll() is not None:
            raise SwitchProcessError(
                f"{waiting[0].name}: {what} exited with {proc.returncode} "
                f"(log: {waiting[0].log_path or 'not kept; pass log_path'})")
        if time.monotonic() > deadline:
            raise SwitchProcessError(f"{waiting[0].name}: {what} not listening on ports "
                                     f"{waiting[0].grpc_port} (P4Runtime) and "
                                     f"{waiting[0].thrift_port} (runtime) after {timeout:.0f} s")
        time.sleep(0.1)


class P4RuntimeSwitch(Switch):
    """Base Mininet node: subclasses say how to build the command line and talk to the CLI.

    Constructor keyword arguments (besides Mininet's name/params):
      device_id (int, required, unique per switch: fabric.topology.Switch.device_id)
      grpc_port (int, default GRPC_BASE_PORT + device_id), bound to 127.0.0.1
      thrift_port (int, default THRIFT_BASE_PORT + device_id): runtime control
      priority_queues (int, default p4rt.names.PRIORITY_QUEUES)
      log_path (str | None): file for the switch's stdout/stderr (default: discarded)
      credentials (RunCredentials | None): the run's keys; None serves plaintext (a switch
        built by hand for an experiment of one's own)
      start_timeout (float seconds, default 30): how long start() waits for the process to
        listen on both ports (its own sockets: a listener another user put there fails it)
      batch_start (bool, default False): start() only launches the process; Mininet's
        batchStartup (after every switch's start()) waits for them all, side by side
    Public interface:
      start(controllers) / stop(deleteIntfs=True)  - Mininet lifecycle; stop kills our PID
      reboot() - a fresh process with empty tables on the same ports; crash() - killed
      grpc_address -> "127.0.0.1:<port>"; switch_pid -> int | None (Mininet's own `pid`
      is the node's shell)
      set_queue_rate(pps, port=None), set_queue_depth(packets, port=None)
      cli(commands) -> str: raw runtime CLI access (BMv2 runtime CLI syntax)
    """

    process_name = "switch"

    def __init__(self, name: str, device_id: int, grpc_port: int | None = None,
                 thrift_port: int | None = None, priority_queues: int = PRIORITY_QUEUES,
                 log_path: str | None = None, start_timeout: float = START_TIMEOUT_S,
                 credentials: RunCredentials | None = None, batch_start: bool = False,
                 **params) -> None:
        params.setdefault("dpid", f"{device_id:x}")
        super().__init__(name, **params)
        self.device_id = device_id
        self.grpc_port = GRPC_BASE_PORT + device_id if grpc_port is None else grpc_port
        self.thrift_port = THRIFT_BASE_PORT + device_id if thrift_port is None else thrift_port
        self.priority_queues = priority_queues
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.credentials = credentials
        self.batch_start = batch_start
        self._awaiting = False
        self.proc: subprocess.Popen | None = None
        check_switch_args(device_id, self.grpc_port, self.thrift_port, priority_queues)

    def command(self, ports: dict[int, str]) -> list[str]:
        raise NotImplementedError

    def process_env(self) -> dict[str, str] | None:
        return None

    def cli(self, commands: list[str]) -> str:
        raise NotImplementedError

    def silence_port(self, ifname: str) -> None:
        """The kernel leaves a switch port alone (silence_kernel_ipv6); a node on another
        server (emulation.cluster.clusternodes) does it through its own shell."""
        silence_kernel_ipv6(ifname)

    def launch(self, cmd: list[str], log_path: str | None,
               env: dict[str, str] | None) -> subprocess.Popen:
        """Start a switch process for this node (here: on this machine)."""
        return launch(cmd, log_path, env)

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def switch_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def read_counters(self, names: list[str], counter: str) -> list[int]:
        """A kernel counter (/sys/class/net/NAME/statistics) of each interface; a node on
        another server (emulation.cluster.clusternodes) reads them through its own shell."""
        out = []
        for name in names:
            try:
                out.append(int(Path(f"/sys/class/net/{name}/statistics/{counter}").read_text()))
            except (OSError, ValueError) as exc:
                raise SwitchProcessError(f"{self.name}: cannot read {counter} of {name}: "
                                         f"{exc}") from exc
        return out

    def _data_ports(self) -> dict[int, str]:
        return {port: intf.name for intf, port in self.ports.items() if intf.name != "lo"}

    def start(self, controllers) -> None:
        """Launch the switch process and wait until it listens on its ports."""
        ports = self._data_ports()
        for ifname in ports.values():
            self.silence_port(ifname)
        self.proc = self.launch(self.command(ports), self.log_path, self.process_env())
        self._awaiting = True
        if not self.batch_start:
            self.await_ready()

    def await_ready(self) -> None:
        """Wait for our process's ports (stop it and raise if they do not come)."""
        if not self._awaiting or self.proc is None:
            return
        try:
            await_listening(self.proc, [self], self.start_timeout, self.process_name)
        except SwitchProcessError:
            stop_process(self.proc, STOP_TIMEOUT_S)
            self.proc = None
            raise
        finally:
            self._awaiting = False

    @classmethod
    def batchStartup(cls, switches: tuple[P4RuntimeSwitch, ...]) -> tuple:  # noqa: N802
        """Mininet's hook after every start(): processes launched with batch_start come up
        side by side; wait for each now."""
        for switch in switches:
            switch.await_ready()
        return switches

    def listening(self, probe: listeners.Snapshot) -> bool:
        """Our process listens on the switch's P4Runtime and runtime ports (`probe`: one
        reading of /proc for many nodes); raises listeners.ForeignListener if another
        socket listens on one of them."""
        if self.proc is None:
            return False
        # both ports read, no short cut: a stranger on the second is named even while the
        # first is not up yet (the process may exit on the bind it lost)
        return all([probe.listens(port, self.proc.pid)
                    for port in (self.grpc_port, self.thrift_port)])

    def is_down(self) -> bool:
        """Crashed, or never started: no process of ours is running."""
        return self.proc is None or self.proc.poll() is not None

    def crash(self) -> None:
        """The switch dies as a crash would: its process SIGKILLed (by PID), tables lost."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
            self.proc = None

    def reboot(self) -> None:
        """A fresh switch process with empty tables, on the same ports (the caller programs
        it again)."""
        self.stop(deleteIntfs=False)
        self.start([])
        self.await_ready()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        """Terminate our own process (by PID), then let Mininet remove the interfaces."""
        if self.proc is not None:
            stop_process(self.proc, STOP_TIMEOUT_S)
            self.proc = None
        super().stop(deleteIntfs)

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

