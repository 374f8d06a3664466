"""Host agent processes inside Mininet hosts, and verified RDMA-write transfers between them.

An agent is started with host.popen (mnexec attaches it to the host's network namespace; the
PID Popen reports is the agent's own, so it is stopped by that PID). Its control socket lives
in the run's work directory: UNIX sockets are file-system objects and reachable from the root
namespace. Every control call opens its own connection, so transfers may run in threads.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from emulation.errors import EmulationError
from fabric.topology import Fabric
from host_agent.control import ControlClient, ControlError
from host_agent.modes import MRC_MODE, AgentMode
from safety.procs import stop_process

REPO = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
CALL_SLACK_S = 30.0  # a client waits this much longer than the agent's own write timeout
AGENT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # ethtool for the agent's kernel setup
RECEIVER_STATS = ("trims_received", "nacks_sent", "ecn_marks_received", "rx_packets")


class AgentError(EmulationError, RuntimeError):
    """An agent did not start, died, or refused a request; the message names the host."""


class AgentProxy:
    """Blocking calls to one agent; thread safe (one connection per call)."""

    def __init__(self, host: int, socket_path: Path) -> None:
        self.host, self.socket_path = host, socket_path

    def call(self, cmd: str, *, wait: float = 60.0, **args: Any) -> dict[str, Any]:
        """`wait`: seconds to wait for the answer (a write answers when it completes)."""
        try:
            with ControlClient(str(self.socket_path), timeout=wait) as client:
                return client.call(cmd, **args)
        except ControlError as exc:
            raise AgentError(f"h{self.host}: {exc}") from exc


class Launcher(Protocol):
    """How a process starts and stops on a node: here (LocalLauncher), or on the node's own
    server (emulation.cluster.clusternet's, over ssh); emulation.builder picks it per node."""

    def start(self, node: Any, argv: Sequence[str], cwd: str, env: dict[str, str],
              log: Path) -> tuple[Any, int]:
        """The process's handle here (Popen-like: pid, poll, returncode) and its PID where
        it runs."""

    def stop(self, proc: Any, timeout: float) -> None:
        """SIGTERM, SIGKILL if it is still there after `timeout`; reaped either way."""


class LocalLauncher:
    """A process in the node's namespaces on this machine, output discarded (the agent
    keeps its own log)."""

    def start(self, node: Any, argv: Sequence[str], cwd: str, env: dict[str, str],
              log: Path) -> tuple[Any, int]:
        proc = node.popen(list(argv), cwd=cwd, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        return proc, proc.pid

    def stop(self, proc: Any, timeout: float) -> None:
        stop_process(proc, timeout)


LOCAL = LocalLauncher()


class AgentProcess:
    """One agent: its Popen (by PID), log file, socket and proxy."""

    def __init__(self, node, host: int, fabric: Fabric, workdir: Path, *, base_rtt: float,
                 keep_ipv6: bool, mode: AgentMode, rx_hold_ms: float = 0.0,
                 nic_rate_pps: int | None = None, server_dir: Path | None = None,
                 launcher: Launcher = LOCAL,
                 served_core: str | None = None) -> None:
        """`server_dir`: the run's directory on the node's server when that is another one
        (emulation.cluster.clusternet): the agent's socket and log live there, and `socket_path`
        here is the forwarded end; `launcher` starts and stops the process where the node runs
        (emulation.builder: the node's builder says how)."""
        self.node, self.host, self.fabric = node, host, fabric
        self.socket_path = workdir / f"h{host}.sock"
        home = workdir if server_dir is None else server_dir
        self.server_socket = home / f"h{host}.sock"
        self.log_path = home / f"h{host}-agent.log"
        self.launcher = launcher
        self._pid: int | None = None  # where it runs
        self.base_rtt, self.keep_ipv6, self.mode = base_rtt, keep_ipv6, mode
        self.rx_hold_ms = rx_hold_ms
        self.nic_rate_pps = nic_rate_pps  # the window starts at the path's BDP (agent --nic-rate)
        self.served_core = served_core  # agent --served-core
        self.proc: subprocess.Popen | None = None
        self.proxy = AgentProxy(host, self.socket_path)
        self.repo = REPO  # the tree whose agent code start() runs (bench.costs.agent_speed:
        # another)

    def command(self) -> list[str]:
        f = self.fabric
        program = "served_core.agent" if self.served_core else "host_agent.agent"
        cmd = [sys.executable, "-m", program, "--host", str(self.host),
               "--planes", str(f.planes), "--t0", str(f.t0_per_plane), "--t1",
               str(f.t1_per_plane), "--hosts-per-t0", str(f.hosts_per_t0),
               "--socket", str(self.server_socket), "--log", str(self.log_path),
               "--base-rtt", f"{self.base_rtt:.6f}", "--exchange-qps"]
        if self.mode != MRC_MODE:  # the default: agents from before --mode (bench.costs.agent_speed
            cmd += ["--mode", self.mode.name]  # --vs an older commit) start as they did
        if self.keep_ipv6:
            cmd.append("--keep-ipv6")
        if self.rx_hold_ms:  # only when set: older agents (agent_speed --vs) lack the flag
            cmd += ["--rx-hold-ms", f"{self.rx_hold_ms:g}"]
        if self.nic_rate_pps:  # likewise; None: an unlimited rate has no BDP to size from
            cmd += ["--nic-rate", str(self.nic_rate_pps)]
        if self.served_core:
            cmd += ["--served-core", str(self.served_core)]
        return cmd

    def start(self) -> None:
        env = {"PYTHONPATH": str(self.repo), "PATH": AGENT_PATH}
        self.proc, self._pid = self.launcher.start(self.node, self.command(), str(self.repo),
                                                   env, self.log_path.with_suffix(".out"))

    @property
    def pid(self) -> int | None:
        """The agent's PID where it runs (on its server, for a remote host)."""
        return None if self.proc is None else self._pid

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Until the agent answers `status` (it has opened its NICs and QPs by then)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AgentError(f"h{self.host}: agent exited with {self.proc.returncode}; "
                                 f"see {self.log_path}: {self.log_tail()}")
            if self.socket_path.exists():
                try:
                    status = self.proxy.call("status", wait=2.0)
                except AgentError:
                    status = None
                if status is not None:
                    if status["pid"] != self.pid:
                        raise AgentError(f"h{self.host}: agent PID {status['pid']} is not the "
                                         f"started process {self.pid}")
                    return
            if time.monotonic() > deadline:
                raise AgentError(f"h{self.host}: agent not ready after {timeout:.0f} s "
                                 f"(log {self.log_path})")
            time.sleep(0.05)

    def log_tail(self, lines: int = 3) -> str:
        if self.server_socket != self.socket_path:
            return "(the log is on the host's server)"
        try:
            return " | ".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM our PID, SIGKILL if it does not go; idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            self.launcher.stop(proc, STOP_TIMEOUT_S)


_seeds = itertools.count(1)


def exchange_qps(agents: dict[int, AgentProxy], only: int | None = None) -> None:
    """Open QP pairs between every two agents, or between `only` (a restarted agent) and
    every other: each side's QPN and initial PSN (drawn from `secrets` by the agent) reach the
    other through the control sockets, out of band, as RC applications exchange them. Two
    agents open as many QPs (lanes) as the one with fewer runs (1 unless both run roce)."""
    # an agent from before the modes (bench.costs.agent_speed --vs an older commit) has one lane
    lanes = {h: a.call("status").get("lanes", 1) for h, a in agents.items()}
    for a, b in itertools.combinations(sorted(agents), 2):
        if only is not None and only not in (a, b):
            continue
        for lane in range(min(lanes[a], lanes[b])):
            on = {"lane": lane} if lane else {}  # lane 0 is the default: older agents too
            offer_a = agents[a].call("qp_info", peer=b, **on)
            offer_b = agents[b].call("qp_info", peer=a, **on)
            agents[a].call("qp_connect", peer=b, qpn=offer_b["qpn"], psn=offer_b["psn"], **on)
            agents[b].call("qp_connect", peer=a, qpn=offer_a["qpn"], psn=offer_a["psn"], **on)


def run_transfer(src: AgentProxy, dst: AgentProxy, nbytes: int, timeout: float) -> dict:
    """Register on dst, write from src, verify on dst byte for byte, deregister.

    Receiver-side counters (trims, NACKs sent) are deltas of dst's totals around the write, so
    with concurrent flows into the same receiver they include the others' packets.
    """
    seed = next(_seeds)
    result: dict[str, Any] = {"src": src.host, "dst": dst.host, "bytes": nbytes, "ok": False}
    region = dst.call("register", size=nbytes)
    try:
        before = dst.call("stats")["endpoint"]
        result["start"] = time.monotonic()
        try:
            write = src.call("write", wait=timeout + CALL_SLACK_S, peer=dst.host,
                             bytes=nbytes, va=region["va"], rkey=region["rkey"], seed=seed,
                             timeout=timeout)
        except AgentError as exc:
            result["error"] = str(exc)
            return result
        finally:
            result["end"] = time.monotonic()
        check = dst.call("verify", rkey=region["rkey"], length=nbytes, seed=seed)
        after = dst.call("stats")["endpoint"]
    finally:
        dst.call("deregister", rkey=region["rkey"])
    duration = write["duration_s"]
    result.update(
        ok=bool(check["match"]), verified=bool(check["match"]),
        first_mismatch=check["first_mismatch"], duration_s=duration,
        goodput_bps=nbytes * 8 / duration, tx_data_packets=write["tx_data_packets"],
        retransmits=write["retransmits"], timeouts=write["timeouts"],
        spurious_timeouts=write["spurious_timeouts"],
        nacks=write["nacks_received"],
        **{("trims" if k == "trims_received" else k): after[k] - before[k]
           for k in RECEIVER_STATS})
    if not result["ok"]:
        result["error"] = f"receiver found a mismatch at byte {check['first_mismatch']}"
    return result


class TransferHandle:
    """A transfer running in a thread; wait() returns run_transfer's dict (or raises its error)."""

    def __init__(self, src: AgentProxy, dst: AgentProxy, nbytes: int, timeout: float) -> None:
        self.src, self.dst = src.host, dst.host
        self.timeout = timeout
        self._result: dict | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(src, dst, nbytes, timeout),
                                        name=f"transfer-h{src.host}-h{dst.host}", daemon=True)
        self._thread.start()

    def _run(self, src: AgentProxy, dst: AgentProxy, nbytes: int, timeout: float) -> None:
        try:
            self._result = run_transfer(src, dst, nbytes, timeout)
        except BaseException as exc:  # handed to wait(): a failing transfer must be seen
            self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> dict:
        self._thread.join(self.timeout + 2 * CALL_SLACK_S if timeout is None else timeout)
        if self._thread.is_alive():
            raise AgentError(f"transfer h{self.src} -> h{self.dst} still running")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result
