"""Failures a running fabric can be put through: links and NICs down and up, a switch
crashed or rebooted. A mix-in of emulation.network.MrcNetwork, which owns the Mininet
network, the controller and the link log these act on; this module owns how each failure is
made and undone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.tables import check_links, link_key
from emulation.capture import capture as capture_link
from emulation.hostsetup import restore_nic_ipv6
from emulation.linkdelay import link_end_qdisc
from emulation.netconfig import NetworkConfig, NetworkError
from fabric.topology import Fabric, TopologyError
from nodes.p4switch import P4RuntimeSwitch, SwitchProcessError
from safety.listeners import ForeignListener

if TYPE_CHECKING:
    from mininet.net import Mininet
    from mininet.node import Host

    from controller.convergence import Convergence
    from controller.install import Controller
    from emulation.builder import Builder
    from safety.runguard import RunGuard

# Drops every frame sent (limit 0 also disables the empty-queue bypass); see _set_link.
BLACKHOLE_QDISC = "pfifo limit 0"


def restore_cmd(ifname: str, delay_qdisc: str | None) -> str:
    """What brings a blackholed switch end back: its link delay's qdisc (BMv2 with
    --link-delay, emulation.linkdelay), else the interface's default qdisc."""
    if delay_qdisc is None:
        return f"tc qdisc del dev {ifname} root"
    return f"tc qdisc replace dev {ifname} root {delay_qdisc}"


class FaultInjection:
    """link_down/cut/up, nic_down/up, kill_switch, switch_down, reboot_switch."""

    fabric: Fabric
    builder: Builder | None
    config: NetworkConfig
    link_log: list[dict[str, Any]]
    convergence: Convergence | None
    controller: Controller | None
    _guard: RunGuard | None
    log: Callable[[str], None]

    def _need_net(self) -> Mininet:
        raise NotImplementedError

    def _host_node(self, host: int) -> Host:
        raise NotImplementedError

    def _set_queues(self, name: str) -> None:
        raise NotImplementedError

    def record_pids(self) -> None:
        raise NotImplementedError

    def _link(self, a: str, b: str):
        (key,) = check_links(self.fabric, [link_key(a, b)])
        net = self._need_net()
        links = net.linksBetween(net[a], net[b])
        if len(links) != 1:
            raise NetworkError(f"expected one Mininet link {a} - {b}, found {len(links)}")
        return key, links[0]

    def _set_link(self, a: str, b: str, up: bool) -> None:
        """Fail or restore a link. A switch's interface is never taken administratively down:
        BMv2 1.15.1's packet capture handle fails for good when its interface goes down (the
        port stayed dead after `up`, and `port_remove` then hung). So a failed link is a
        blackhole on each switch end's egress (a pfifo qdisc of limit 0 drops every frame the
        switch sends; the kernel delivers nothing else to it), and a host's end, the NIC the
        agent watches, goes down for real (its switch end then has no carrier)."""
        _key, link = self._link(a, b)
        state = "up" if up else "down"
        assert self.builder is not None
        if self.builder.is_cut(a, b):
            if not up:
                raise NetworkError(f"{a} - {b} is cut: bring it up first")
            self._mend(a, b)
            return
        for intf in (link.intf1, link.intf2):
            if isinstance(intf.node, P4RuntimeSwitch):
                cmd = (restore_cmd(intf.name, link_end_qdisc(self.config)) if up
                       else f"tc qdisc replace dev {intf.name} root {BLACKHOLE_QDISC}")
            else:
                cmd = f"ip link set dev {intf.name} {state}"
            out = intf.node.cmd(cmd)
            if out.strip():
                raise NetworkError(f"{intf.name} {state}: {cmd}: {out.strip()}")
        self.link_log.append({"time": time.monotonic(), "event": state, "a": a, "b": b})
        assert self.convergence is not None
        (self.convergence.link_up if up else self.convergence.link_down)(a, b)

    def capture(self, a: str, b: str, seconds: float, path: Path) -> int:
        """A pcap of the link a - b for `seconds` (emulation.capture); the frames captured."""
        _key, link = self._link(a, b)
        manifest = getattr(self, "_manifest", None)
        assert self.builder is not None
        return capture_link(link, seconds, path, self.builder.is_here,
                            record=manifest.add_pid if manifest is not None else None)

    def link_cut(self, a: str, b: str) -> None:
        """Cut the cable a - b between two servers: both ends stay up and every frame is lost
        on the underlay (emulation.cluster.cablecut); link_up mends it."""
        self._link(a, b)  # a cable of this fabric, or NetworkError
        assert self.builder is not None
        if self.builder.is_cut(a, b):
            raise NetworkError(f"{a} - {b} is already cut")
        self.builder.cut(a, b, on=True)
        self.link_log.append({"time": time.monotonic(), "event": "cut", "a": a, "b": b})
        assert self.convergence is not None
        self.convergence.link_down(a, b)

    def _mend(self, a: str, b: str) -> None:
        assert self.builder is not None and self.convergence is not None
        dropped = self.builder.cut(a, b, on=False)
        self.link_log.append({"time": time.monotonic(), "event": "up", "a": a, "b": b,
                              "cut_dropped": dropped})
        self.convergence.link_up(a, b)

    def link_down(self, a: str, b: str) -> None:
        self._set_link(a, b, up=False)

    def link_up(self, a: str, b: str) -> None:
        self._set_link(a, b, up=True)

    def _nic_link(self, host: int, plane: int) -> tuple[str, str]:
        try:
            nic = self.fabric.nic(host, plane)
        except TopologyError as exc:
            raise NetworkError(str(exc)) from None
        return self.fabric.host_name(host), self.fabric.t0(plane, nic.t0).name

    def nic_down(self, host: int, plane: int) -> None:
        self._set_link(*self._nic_link(host, plane), up=False)

    def nic_up(self, host: int, plane: int) -> None:
        """Link up; with keep_ipv6 also the neighbour and route Linux dropped with the link."""
        self._set_link(*self._nic_link(host, plane), up=True)
        if self.config.keep_ipv6:
            restore_nic_ipv6(self._host_node(host), self.fabric, host, plane)

    def kill_switch(self, name: str) -> None:
        """Crash one switch (node.crash(): its process, or its place in a shared one)."""
        node = self._need_net()[self._switch_name(name)]
        node.crash()
        self.link_log.append({"time": time.monotonic(), "event": "crash", "a": name, "b": ""})

    def switch_down(self, name: str) -> bool:
        """The switch is crashed (node.is_down())."""
        return self._need_net()[self._switch_name(name)].is_down()

    def _switch_name(self, name: str) -> str:
        if name not in self.fabric.by_name:
            raise NetworkError(f"no switch {name!r}: names look like "
                               f"{self.fabric.switches[0].name}")
        return name

    def _move_and_start(self, name: str, node: P4RuntimeSwitch) -> None:
        """A rebooting switch found a stranger listening on one of its ports (its process
        had freed them): it starts again on free ones, shielded and known to the controller,
        instead of failing (safety.runports)."""
        assert self._guard is not None
        ports = self._guard.move_switch(name, self.fabric, self.log)
        node.grpc_port, node.thrift_port = ports.grpc, ports.thrift
        if self.controller is not None:
            self.controller.move(name, ports.grpc_address)
        node.start([])
        node.await_ready()

    def reboot_switch(self, name: str) -> float:
        """Kill the switch process (by PID), restart it, reinstall its tables; returns seconds."""
        node = self._need_net()[self._switch_name(name)]
        start = time.monotonic()
        try:
            node.reboot()
        except SwitchProcessError as exc:
            if not isinstance(exc.__cause__, ForeignListener) or self._guard is None \
                    or self.builder is None or not self.builder.replace_ports:
                raise
            self._move_and_start(name, node)
        self.link_log.append({"time": start, "event": "reboot", "a": name, "b": ""})
        self.record_pids()
        assert self.controller is not None
        result = self.controller.install(name)
        if not result.ok:
            raise NetworkError(f"reinstalling {name} failed: {result.error}")
        self._set_queues(name)
        seconds = time.monotonic() - start
        self.link_log.append({"time": time.monotonic(), "event": "rebooted", "a": name, "b": ""})
        return seconds
