"""A running emulated MRC fabric: Mininet nodes, programmed switches, one host agent per host.

    with MrcNetwork(NetworkConfig()) as net:
        net.start()
        print(net.transfer(0, 3, 1_000_000))

The API (docs/getting-started.md shows it in use), beyond start/stop/transfer/link_down/link_up;
what a fabric is built with is emulation.netconfig.NetworkConfig (re-exported here):
- transfer(single_path=True) on a network whose agents run MRC restarts the two agents involved
  in single-path mode (and back again for an MRC transfer); it refuses while either agent has a
  transfer running. A host agent runs one mode at a time because EndpointConfig is per endpoint.
- link_down/link_up always inform controller.convergence: only baseline LPM/ECMP routes change
  (MRC tables are static), so MRC traffic is unaffected while single-path traffic sees a
  conventional network's hold-timer repair.
- link_cut(a, b) on a cluster: a cable between servers cut on the underlay, both ends up;
  link_up mends it (emulation.cluster.cablecut).
- link_log (monotonic times of link and NIC events), agent_pid(host), switch_pid(name).
- port_rate_pps "auto": start() first measures the rate (rate_choice says what and why).
- set_agent_mode(host, mode): restart one agent in the given host_agent.modes mode (what
  transfer does implicitly), for callers that drive agents themselves.

One fabric per machine (interface names and loopback ports are global): start() takes the
exclusive lock in the run's private directory (safety.runguard), waiting up to
NetworkConfig.lock_timeout for another fabric, or for leftover interfaces of one built without
the lock, whose name it gives when it times out. Cleanup: agents and switch processes by PID,
veths in batches, host shells (and their namespaces) by Mininet. No name-based killing.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from mininet.net import Mininet
from mininet.node import Host

from controller.convergence import Convergence
from controller.install import Controller, InstallError
from emulation import capacity, fabricnet
from emulation.agents import AgentError, AgentProcess, AgentProxy, TransferHandle, exchange_qps
from emulation.builder import Builder
from emulation.calibration import CalibrationError, calibrate_transfer
from emulation.cluster.clusternet import builder_type
from emulation.faults import FaultInjection
from emulation.hostsetup import configure_kernel_ipv6, delay_nics, pace_nics
from emulation.impair import remove_loss
from emulation.linkdelay import delay_switch_ends, link_end_qdisc, refuse_on_bmv2
from emulation.netconfig import AUTO_RATE, NetworkConfig, NetworkError
from host_agent.modes import MRC_MODE, ROCE, AgentMode
from nodes.targets import resolve
from safety.credentials import RunCredentials
from safety.privdir import check_workdir
from safety.runguard import RunGuard
from safety.runports import PortPlan
from safety.runstate import (
    RunManifest,
    acquire_fabric_lock,
    deferred_signals,
    existing_interface,
    fabric_interfaces,
    kill_all,
    make_workdir,
    wait_interfaces_gone,
)


class MrcNetwork(FaultInjection):
    def __init__(self, config: NetworkConfig, *, workdir: Path | None = None, log=print) -> None:
        self.config = config
        self.fabric = config.fabric
        self.log = log
        self.target = resolve(config.target)
        self._own_workdir = workdir is None
        # ours is made by start(), so a network never started leaves none; a given one is checked
        self.workdir = Path() if workdir is None else workdir
        if workdir is not None:
            check_workdir(workdir)
        self._guard: RunGuard | None = None  # the run's lock, manifest, keys and shield
        self._builder_type = builder_type(config)  # this machine, or several servers
        self.builder: Builder | None = None  # made by start(), once the run is recorded
        self.thresholds = config.port_thresholds
        self.net: Mininet | None = None
        self.controller: Controller | None = None
        self.static_tables: dict[str, Any] = {}  # installed instead of derived ones (a grader's)
        self.convergence: Convergence | None = None
        self.agents: dict[int, AgentProcess] = {}
        self.link_log: list[dict[str, Any]] = []
        self.timings: dict[str, float] = {}
        self.rate_choice: dict[str, Any] | None = None  # port_rate_pps "auto": what and why
        self._handles: list[TransferHandle] = []
        self._stopped = False
        self._killed = False  # a second interrupt killed the recorded processes (stop())
        self._in_mininet_stop = False

    @property
    def credentials(self) -> RunCredentials | None:
        return self._guard.credentials if self._guard else None

    @property
    def ports(self) -> PortPlan:
        """Each switch's loopback ports in this run (safety.runports)."""
        return self._guard.ports if self._guard else PortPlan.defaults(self.fabric)

    @property
    def shield_table(self) -> str | None:
        """safety.shield's table over the switches' control ports."""
        return self._guard.shield_table if self._guard else None

    @property
    def _manifest(self) -> RunManifest | None:
        return self._guard.manifest if self._guard else None

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> MrcNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Build, program and start everything; on any failure clean up and re-raise. A
        fabric this machine's memory cannot hold is refused before anything starts."""
        try:  # the work directory is made by _start's RunGuard, once the run is recorded
            capacity.check(self.fabric, self.target, self.config.soft_processes)
            refused = refuse_on_bmv2(self.config.link_delay_s, self.target)
            if refused:
                raise NetworkError(refused)
            if self.config.port_rate_pps == AUTO_RATE:
                self.rate_choice = calibrate_transfer(type(self), self.config, 0,
                                                      self.fabric.hosts - 1, self.log)
                self.config = dataclasses.replace(self.config,
                                                  port_rate_pps=self.rate_choice["rate_pps"])
            self._start()
        except (NetworkError, AgentError, CalibrationError):
            self.stop()
            raise
        except Exception as exc:  # Mininet raises bare Exception (e.g. an interface exists)
            self.stop()
            raise NetworkError(f"building the fabric failed: {exc}") from exc
        except BaseException:  # Ctrl-C, or SystemExit from a SIGTERM handler (the bench's)
            self.stop()
            raise

    def _start(self) -> None:
        deadline = time.monotonic() + self.config.lock_timeout
        make = (lambda: make_workdir(self)) if self._own_workdir else None  # mkdtemp, 0700
        self._guard = RunGuard(self.fabric, None if make else self.workdir, self._own_workdir,
                               self.config.lock_timeout, self.log, make_workdir=make,
                               replace_ports=self._builder_type.replace_ports)
        self.workdir = self._guard.workdir or self.workdir
        self._manifest.add_interfaces(fabric_interfaces(self.fabric))
        wait_interfaces_gone(self.fabric, deadline, self.log)
        t0 = time.monotonic()
        self._build()
        t1 = time.monotonic()
        self.controller = Controller(self.fabric, self.target, thresholds=self.thresholds,
                                     addresses=self.ports.addresses(),
                                     tls=self.credentials.client)
        self.controller.current.update(self.static_tables)
        failed = [r for r in self.controller.install_all() if not r.ok]
        if failed:
            raise NetworkError("switch programming failed: "
                               + "; ".join(r.error for r in failed[:4]))
        self.convergence = Convergence(self.fabric, self.controller,
                                       self.config.convergence_delay,
                                       thresholds=self.thresholds)
        fabricnet.set_queues(self.net, [sw.name for sw in self.fabric.switches], self.config)
        t2 = time.monotonic()
        if self.config.keep_ipv6:
            for h in range(self.fabric.hosts):
                configure_kernel_ipv6(self._host_node(h), self.fabric, h)
        if self.config.agents:
            for h in range(self.fabric.hosts):
                self._start_agent(h, _mode(self.config.single_path), wait=False)
            for agent in self.agents.values():
                agent.wait_ready()
            exchange_qps(self._proxies())
        t3 = time.monotonic()
        self.timings = {"mininet_s": t1 - t0, "program_s": t2 - t1, "agents_s": t3 - t2,
                        "total_s": t3 - t0}
        self.log(f"fabric up in {t3 - t0:.1f} s: {len(self.fabric.switches)} {self.target} "
                 f"switches, {self.fabric.hosts} hosts, {self.fabric.planes} planes "
                 f"(Mininet {t1 - t0:.1f} s, programming {t2 - t1:.1f} s, "
                 f"agents {t3 - t2:.1f} s)")

    def _build(self) -> None:
        assert self._manifest is not None
        self.builder = self._builder_type(self.config, self.workdir, self.credentials, self.log,
                                          self._manifest.add_nft_table, ports=self.ports)
        self.net = fabricnet.empty_net()
        self.builder.build(self.net, self.target)
        self.record_pids()
        try:
            self.builder.start(self.net)
        finally:
            self.record_pids()
        delay = link_end_qdisc(self.config)  # BMv2 with --link-delay: netem (linkdelay)
        for h in range(self.fabric.hosts):
            if self.config.pace_nics and self.config.port_rate_pps is not None:
                pace_nics(self._host_node(h), self.fabric, h, self.config.port_rate_pps, delay)
            elif delay is not None:
                delay_nics(self._host_node(h), self.fabric, h, delay)
        delay_switch_ends(self.net, self.config)

    def record_pids(self) -> None:
        """Record every process this run owns (for a second Ctrl-C and for the next start);
        call it after starting a process behind the network's back (bench.costs.soak)."""
        if self._manifest is None or self.net is None:
            return
        assert self.builder is not None
        for node in self.net.hosts + self.net.switches:
            self._manifest.add_pid(self.builder.own_pid(node))
            proc = getattr(node, "proc", None)
            self._manifest.add_pid(proc.pid if proc is not None else None)
        for agent in self.agents.values():
            self._manifest.add_pid(agent.proc.pid if agent.proc is not None else None)

    def _kill_tracked(self) -> None:
        """Second Ctrl-C during stop(): SIGKILL everything recorded, by PID; stop() goes on
        without Mininet, whose commands would wait forever on the killed node shells (if it
        is in one now, it is abandoned) and sweeps by PID and name instead."""
        if self._manifest is not None:
            self.log("second interrupt: killing the fabric's processes")
            kill_all(self._manifest.live_pids())
        self._killed = True
        if self._in_mininet_stop:
            # into the running Mininet stop: an interrupt passes every `except Exception` in
            # Mininet, so nothing there carries on with the killed shells; signals are held
            # during stop() (deferred_signals), so no other interrupt can arrive there
            raise KeyboardInterrupt("second interrupt: Mininet stop abandoned")

    def _set_queues(self, name: str) -> None:
        fabricnet.set_queues(self._need_net(), [name], self.config)

    def _host_node(self, host: int) -> Host:
        return self.net[self.fabric.host_name(host)]  # type: ignore[index]

    def _start_agent(self, host: int, mode: AgentMode, wait: bool = True) -> None:
        node = self._host_node(host)
        assert self.builder is not None
        extra: dict = {"served_core": dict(self.config.served_cores).get(host),
                       **self.builder.agent_options(node)}
        agent = AgentProcess(node, host, self.fabric, self.workdir,
                             base_rtt=self.config.effective_base_rtt,
                             keep_ipv6=self.config.keep_ipv6, mode=mode,
                             rx_hold_ms=self.config.rx_hold_ms,
                             nic_rate_pps=self.config.port_rate_pps, **extra)
        self.agents[host] = agent
        agent.start()
        self.record_pids()
        if wait:
            self.reconnect_agent(host)

    def _proxies(self) -> dict[int, AgentProxy]:
        return {h: a.proxy for h, a in self.agents.items()}

    def exchange_qps(self, hosts: list[int]) -> None:
        """Fresh QPs (new QPNs, PSNs and EV tags) between every two of `hosts`."""
        proxies = self._proxies()
        exchange_qps({h: proxies[h] for h in hosts})

    def reconnect_agent(self, host: int) -> None:
        """After h`host`'s agent (re)started: wait for it, then exchange QPs with every other
        (their old QPs to it are replaced; writes still on them are flushed)."""
        self.agents[host].wait_ready()
        exchange_qps(self._proxies(), only=host)

    def stop(self) -> None:
        """Idempotent; every step runs even if an earlier one failed. Ctrl-C/SIGTERM wait
        until it is done (a second one SIGKILLs the recorded PIDs), then raise
        KeyboardInterrupt."""
        if self._stopped:
            return
        self._stopped = True
        with deferred_signals(self._kill_tracked):
            self._stop()

    def _stop(self) -> None:
        errors: list[str] = []
        if self.convergence is not None:
            self.convergence.scheduler.cancel()  # type: ignore[attr-defined]
        for agent in self.agents.values():
            try:
                agent.stop()
            except OSError as exc:
                errors.append(f"h{agent.host}: {exc}")
        if self.controller is not None:
            self.controller.close()
        remove_loss()  # a loss experiment cut short leaves its (now idle) nftables table
        if self.net is not None:
            if self._killed:
                errors.append("second interrupt: stopped by PID and name")
            elif any(node.waiting for node in self.net.hosts + self.net.switches):
                # Ctrl-C cut a Mininet command short: that shell takes no other command
                errors.append("a Mininet command was interrupted: stopped by PID and name")
            else:
                self._in_mininet_stop = True
                try:
                    fabricnet.stop_switches(self.net)
                    if self.builder is not None:
                        self.builder.remove_links(self.net)
                    self.net.stop()  # switch processes by PID (node.stop), veths, host shells
                except KeyboardInterrupt:  # _kill_tracked's, the only one stop() lets in
                    errors.append("second interrupt: Mininet stop abandoned, swept by PID and "
                                  "name")
                except Exception as exc:  # noqa: BLE001 (Mininet raises bare ones; swept next)
                    errors.append(f"Mininet stop: {exc!r}")
                finally:
                    self._in_mininet_stop = False
        if self.builder is not None:  # every other server: logs copied, then released
            for server, swept in self.builder.close().items():
                if swept is None or swept.get("error") or swept.get("processes") \
                        or swept.get("interfaces"):
                    errors.append(f"{server}: {swept}")
        if self._guard is not None:  # what Mininet did not stop, by PID and name; the lock
            swept = self._guard.release()
            if any(swept.values()) and errors:
                errors.append(f"removed {swept['processes']} processes and "
                              f"{swept['interfaces']} interfaces it left")
        if errors:
            self.log("stop: " + "; ".join(errors))

    # ---- access ------------------------------------------------------------------------------

    def host(self, i: int):
        return self._need_net()[self.fabric.host_name(i)]

    def agent(self, i: int) -> AgentProxy:
        if i not in self.agents:
            raise NetworkError(f"no agent on h{i}: hosts are 0..{self.fabric.hosts - 1} and "
                               "agents run only with NetworkConfig(agents=True)")
        return self.agents[i].proxy

    def agent_pid(self, i: int) -> int | None:
        """The agent's PID on this machine; None for one on another server (its PID there
        means nothing here)."""
        proc = self.agents[i].proc if i in self.agents else None
        return self._local_pid(proc)

    def switch_pid(self, name: str) -> int | None:
        """As agent_pid, for a switch's process."""
        node = self._need_net()[name]
        return self._local_pid(node.proc)

    def _local_pid(self, proc: Any) -> int | None:
        return None if proc is None or self.builder is None else self.builder.local_pid(proc)

    def _need_net(self) -> Mininet:
        if self.net is None or self._stopped:
            raise NetworkError("the network is not running: call start() first")
        return self.net

    # ---- transfers ---------------------------------------------------------------------------

    def transfer(self, src: int, dst: int, nbytes: int, *, single_path: bool = False,
                 timeout: float = 120.0) -> dict:
        return self.start_transfer(src, dst, nbytes, single_path=single_path,
                                   timeout=timeout).wait()

    def start_transfer(self, src: int, dst: int, nbytes: int, *, single_path: bool = False,
                       timeout: float = 120.0) -> TransferHandle:
        if src == dst:
            raise NetworkError(f"source and destination are both h{src}: pick two hosts")
        if nbytes < 1:
            raise NetworkError(f"transfer size must be at least 1 byte, got {nbytes}")
        for h in (src, dst):
            self.set_agent_mode(h, _mode(single_path))
        handle = TransferHandle(self.agent(src), self.agent(dst), nbytes, timeout)
        handle.single_path = single_path  # type: ignore[attr-defined]
        self._handles.append(handle)
        return handle

    def set_agent_mode(self, host: int, mode: AgentMode) -> None:
        """Run h`host`'s agent in `mode` (restarts it if the mode differs); refuses while the
        agent has a transfer running."""
        self.agent(host)
        if self.agents[host].mode != mode:
            self._switch_mode(host, mode)

    def _switch_mode(self, host: int, mode: AgentMode) -> None:
        self._handles = [h for h in self._handles if not h.done()]
        if any(host in (h.src, h.dst) for h in self._handles):
            raise NetworkError(f"h{host}'s agent runs {self.agents[host].mode.name} transfers "
                               "right now; wait for them before switching its mode")
        self.agents[host].stop()
        self._start_agent(host, mode)

    # ---- observation -------------------------------------------------------------------------

    def stats(self, host: int, per_ev: bool = False) -> dict:
        return self.agent(host).call("stats", per_ev=per_ev or None)

    def switch_ports(self, name: str) -> dict[int, str]:
        """Port number -> interface name of a switch's data ports."""
        return dict(self._need_net()[name]._data_ports())

    def port_sent(self, name: str) -> dict[int, int]:
        """Frames each port of a switch has sent (all priorities), from the kernel."""
        return fabricnet.port_counters(self._need_net(), name, "tx_packets")

    def switch_packet_counts(self) -> dict[str, dict[int, tuple[int, int]]]:
        """Switch -> port -> (rx, tx) frames, every switch at once (the run view's reading)."""
        assert self.builder is not None
        return fabricnet.switch_packet_counts(self._need_net(), self.fabric,
                                              self.builder.is_here)

    def switch_counters(self, name: str, counters: tuple[str, ...], ports: list[int]
                        ) -> dict[str, dict[int, int]]:
        """Per-port P4 counters (trims, ECN marks) of switch `name`, over P4Runtime."""
        if self.controller is None:
            raise NetworkError("the fabric is not started")
        try:
            return self.controller.port_counters(name, counters, ports)
        except InstallError as exc:
            raise NetworkError(str(exc)) from exc

    def port_sent_bytes(self, name: str) -> dict[int, int]:
        """Bytes each port of a switch has sent (all priorities), from the kernel."""
        return fabricnet.port_counters(self._need_net(), name, "tx_bytes")

    def switch_frames(self) -> dict[str, dict[str, int]]:
        """Frames each switch took in and sent out (fabricnet.switch_frames)."""
        assert self.builder is not None
        return fabricnet.switch_frames(self._need_net(), self.fabric, self.builder.is_here)

    def events(self, host: int, since: int = 0) -> list:
        return self.agent(host).call("events", since=since)["events"]


def _mode(single_path: bool) -> AgentMode:
    """The demo's baseline (`single_path`) is the single_port mode: one QP on plane 0."""
    return AgentMode(ROCE, 1) if single_path else MRC_MODE


__all__ = ["AgentError", "MrcNetwork", "NetworkConfig", "NetworkError", "acquire_fabric_lock",
           "existing_interface", "fabric_interfaces", "wait_interfaces_gone"]
