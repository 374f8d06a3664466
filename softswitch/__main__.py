"""`python -m softswitch`: software switches started like simple_switch_grpc.

    python -m softswitch -i 1@veth1 -i 2@veth2 --device-id 1 \\
        --grpc-server-addr 127.0.0.1:20001 --thrift-port 9091 --priority-queues 2 --no-p4
    python -m softswitch --switch 1:20001:9091:1@s1-eth1,2@s1-eth2 \\
        --switch 2:20002:9092:1@s2-eth1 --priority-queues 2

The pipeline arrives over P4Runtime (SetForwardingPipelineConfig). `--thrift-port`
names the loopback TCP port of the runtime control socket (JSON lines, see
softswitch/cli.py), the counterpart of BMv2's Thrift runtime CLI.

With `--switch DEVICE_ID:GRPC_PORT:CONTROL_PORT:PORT@IFNAME,...` (repeated) one process serves
many switches: each keeps its own P4Runtime address 127.0.0.1:GRPC_PORT (its own device id,
arbitration and limits; one gRPC server answers on all of them, softswitch.router), its own
control port, ports, queues and tables; one event loop moves every switch's frames. A
switch's `detach` control command crashes it alone and `attach` reboots it (Process).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import resource
import signal
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
from p4.v1 import p4runtime_pb2

from p4rt.errors import P4rtError
from p4rt.p4info import load_text as load_p4info
from p4rt.tls import read_private, server_credentials
from softswitch.dataplane import Dataplane
from softswitch.errors import SoftSwitchError
from softswitch.loop import EventLoop
from softswitch.router import Router, serve_router
from softswitch.server import Device, P4RuntimeService

LOG_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
              "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR,
              "critical": logging.CRITICAL, "off": logging.CRITICAL + 10}


CLOSE_THREADS = 16  # 288 packet sockets: 5.4 s closed one by one
EXIT_LOOP_FAILED = 70  # EX_SOFTWARE: the event loop raised (a bug; logged first)


class ConfigError(SoftSwitchError, ValueError):
    """Bad command line; the message says what to fix."""


@dataclass(frozen=True)
class SwitchSpec:
    """One switch of the process: device id, P4Runtime address, control port, ports."""
    device_id: int
    address: str
    control_port: int | None
    ports: dict[int, str]


def parse_interface(text: str) -> tuple[int, str]:
    port, sep, name = text.partition("@")
    if not sep or not port.isdigit() or not name:
        raise ConfigError(f"interface {text!r} must look like PORT@IFNAME, e.g. 1@s1-eth1")
    number = int(port)
    if not 0 <= number < 511:
        raise ConfigError(f"port {number} out of range 0..510 (9-bit port, 511 is drop)")
    return number, name


def parse_loopback(addr: str) -> str:
    host, sep, port = addr.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"P4Runtime address {addr!r} must be HOST:PORT with a port in "
                          "1..65535")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ConfigError(f"--grpc-server-addr {addr!r}: the P4Runtime server only binds to "
                          "loopback (use 127.0.0.1:PORT)")
    return addr


def _server_tls(args: argparse.Namespace) -> grpc.ServerCredentials | None:
    files = (args.grpc_server_cacert, args.grpc_server_cert, args.grpc_server_key)
    if not args.grpc_server_ssl:
        if any(files) or args.grpc_server_with_client_auth:
            raise ConfigError("the --grpc-server-* certificate options need --grpc-server-ssl")
        return None
    if not all(files):
        raise ConfigError("--grpc-server-ssl needs --grpc-server-cacert, --grpc-server-cert "
                          "and --grpc-server-key")
    return server_credentials(*files, client_auth=args.grpc_server_with_client_auth)


def parse_switch(text: str) -> SwitchSpec:
    """DEVICE_ID:GRPC_PORT:CONTROL_PORT:PORT@IFNAME[,PORT@IFNAME...] -> SwitchSpec."""
    parts = text.split(":", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[:3]):
        raise ConfigError(f"--switch {text!r} must look like DEVICE_ID:GRPC_PORT:CONTROL_PORT:"
                          "PORT@IFNAME,..., e.g. 1:50001:9091:1@s1-eth1,2@s1-eth2")
    device_id, grpc_port, control_port = (int(p) for p in parts[:3])
    interfaces = [i for i in parts[3].split(",") if i]
    return _spec(device_id, f"127.0.0.1:{grpc_port}", control_port, interfaces)


def _spec(device_id: int, address: str, control_port: int | None,
          interfaces: list[str]) -> SwitchSpec:
    ports = dict(parse_interface(i) for i in interfaces)
    if len(ports) != len(interfaces):
        raise ConfigError(f"switch {device_id}: the same port number is given twice")
    if len(set(ports.values())) != len(ports):
        raise ConfigError(f"switch {device_id}: the same interface is given twice")
    if control_port is not None and not 1 <= control_port <= 65535:
        raise ConfigError(f"switch {device_id}: control port {control_port} not in 1..65535")
    return SwitchSpec(device_id, parse_loopback(address), control_port, ports)


def _specs(args: argparse.Namespace) -> list[SwitchSpec]:
    if not args.switch:
        return [_spec(args.device_id, args.grpc_server_addr, args.thrift_port, args.interface)]
    parser = build_parser()
    single = (args.interface, args.thrift_port, args.device_id, args.grpc_server_addr)
    if single != ([], None, parser.get_default("device_id"),
                  parser.get_default("grpc_server_addr")):
        raise ConfigError("give either --switch (many switches) or -i/--device-id/"
                          "--grpc-server-addr/--thrift-port (one), not both")
    specs = [parse_switch(text) for text in args.switch]
    seen: dict[str, list] = {
        "device id": [s.device_id for s in specs],
        "loopback port": [p for s in specs for p in (int(s.address.rpartition(":")[2]),
                                                       s.control_port)],
        "interface": [i for s in specs for i in s.ports.values()]}
    for label, values in seen.items():
        if len(set(values)) != len(values):
            dup = next(v for v in values if values.count(v) > 1)
            raise ConfigError(f"--switch: {label} {dup} is given twice")
    return specs


class Process:
    """The switches this process serves, their one P4Runtime server and the one loop.

    A switch's `detach` control command is its crash: its ports close, its tables are gone
    and its P4Runtime requests get UNAVAILABLE; only its control port stays (the same
    listening socket throughout), answering `attach` (the reboot: the same ports, empty
    tables) and `stats`."""

    def __init__(self, priorities: int, credentials: grpc.ServerCredentials | None,
                 token: str | None, p4info: Path | None) -> None:
        self.loop = EventLoop()
        self.router = Router()
        self.priorities, self.credentials, self.token = priorities, credentials, token
        self.p4info = p4info
        self.specs: dict[int, SwitchSpec] = {}
        self.switches: dict[int, Dataplane] = {}
        self.server: grpc.Server | None = None

    def add(self, spec: SwitchSpec) -> None:
        """Open the switch's ports and control port; serve() then starts P4Runtime."""
        dataplane = self._dataplane(spec)
        self.specs[spec.device_id] = spec
        self.switches[spec.device_id] = dataplane
        try:
            dataplane.open_ports()
            self._power_on(spec.device_id)
        except BaseException:
            self.switches.pop(spec.device_id)
            dataplane.close()
            raise
        logging.getLogger("softswitch").info("switch %d: ports %s, P4Runtime on %s",
                                             spec.device_id, spec.ports, spec.address)

    def _dataplane(self, spec: SwitchSpec, listener: socket.socket | None = None) -> Dataplane:
        """A switch for `spec`, serving runtime control on `listener` (the crashed switch's,
        still open) or on a control socket of its own."""
        dataplane = Dataplane(spec.ports, self.priorities, self.loop)
        try:
            if listener is not None:
                dataplane.take_control(listener, self.token)
            elif spec.control_port is not None:
                dataplane.open_control(spec.control_port, self.token)
        except BaseException:
            dataplane.close()
            raise
        dataplane.process_stats = self.router.stats
        dataplane.on_detach = lambda: self.detach(spec.device_id)
        dataplane.on_attach = lambda: self.attach(spec.device_id)
        return dataplane

    def _power_on(self, device_id: int) -> None:
        dataplane = self.switches[device_id]
        device = Device(device_id, dataplane.set_state, stats=dataplane.stats)
        if self.p4info:
            device.commit(p4runtime_pb2.ForwardingPipelineConfig(
                p4info=load_p4info(self.p4info)))
        self.router.add(P4RuntimeService(device))

    def serve(self) -> None:
        """One gRPC server on every switch's P4Runtime address (softswitch.router)."""
        self.server = serve_router(self.router, [s.address for s in self.specs.values()],
                                   len(self.specs), self.credentials)

    def detach(self, device_id: int) -> None:
        """The switch crashes alone: a fresh switch, down, takes over its control listener,
        which is never closed (so no other local user can take the port meanwhile)."""
        self.router.take_down(device_id)
        crashed = self.switches.pop(device_id)
        listener = crashed.hand_over_control()
        crashed.close()
        down = self._dataplane(self.specs[device_id], listener)
        down.down = True
        self.switches[device_id] = down
        logging.getLogger("softswitch").info("switch %d is down", device_id)

    def attach(self, device_id: int) -> None:
        """The switch reboots: its ports open again, with no pipeline and default queues."""
        dataplane = self.switches[device_id]
        dataplane.open_ports()
        dataplane.down = False
        self._power_on(device_id)
        logging.getLogger("softswitch").info("switch %d is up again", device_id)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0.5).wait()
        socks = [s for dataplane in self.switches.values() for s in dataplane.release()]
        with ThreadPoolExecutor(CLOSE_THREADS) as pool:  # each close waits out an RCU period
            list(pool.map(socket.socket.close, socks))
        self.switches.clear()
        self.loop.close()


def _raise_fd_limit() -> None:
    """Take the hard limit on open files as ours: a process serving 136 switches holds about
    seven descriptors per switch (port sockets, their epolls, control and gRPC listeners),
    near the usual soft limit of 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m softswitch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-i", "--interface", action="append", default=[], metavar="PORT@IFNAME")
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument("--grpc-server-addr", default="127.0.0.1:9559")
    p.add_argument("--thrift-port", type=int, default=None,
                   help="loopback TCP port of the runtime control socket (default: none)")
    p.add_argument("--priority-queues", type=int, default=1)
    p.add_argument("--log-level", "-L", default="info", choices=sorted(LOG_LEVELS))
    p.add_argument("--no-p4", action="store_true",
                   help="start without a pipeline (the default: it comes over P4Runtime)")
    p.add_argument("--grpc-server-ssl", action="store_true",
                   help="serve P4Runtime over TLS (as simple_switch_grpc; needs the next three)")
    p.add_argument("--grpc-server-cacert", type=Path, help="CA certificate to verify clients")
    p.add_argument("--grpc-server-cert", type=Path, help="server certificate (PEM)")
    p.add_argument("--grpc-server-key", type=Path, help="server key (PEM)")
    p.add_argument("--grpc-server-with-client-auth", action="store_true",
                   help="require a client certificate signed by --grpc-server-cacert")
    p.add_argument("--control-token-file", type=Path,
                   help="refuse runtime control requests that lack this file's token")
    p.add_argument("--switch", action="append", default=[],
                   metavar="DEVICE_ID:GRPC_PORT:CONTROL_PORT:PORT@IFNAME,...",
                   help="serve this switch in this process (repeat for many)")
    p.add_argument("--p4info", type=Path, default=None,
                   help="preload this P4Info (text format) instead of waiting for one")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        specs = _specs(args)
        if not 1 <= args.priority_queues <= 8:
            raise ConfigError("--priority-queues must be 1..8")
        credentials = _server_tls(args)
        token = read_private(args.control_token_file).decode().strip() \
            if args.control_token_file else None
    except (SoftSwitchError, P4rtError) as err:  # each unit's base: refused
        print(f"softswitch: {err}", file=sys.stderr)
        return 2
    ids = [s.device_id for s in specs]
    label = ",".join(map(str, ids)) if len(ids) <= 4 else f"{ids[0]}..{ids[-1]}"
    logging.basicConfig(level=LOG_LEVELS[args.log_level],
                        format=f"softswitch[{label}] %(levelname)s %(name)s: %(message)s")
    _raise_fd_limit()
    process = Process(args.priority_queues, credentials, token, args.p4info)
    try:
        for spec in specs:
            process.add(spec)
        process.serve()
    except (OSError, SoftSwitchError) as err:
        print(f"softswitch: {err}", file=sys.stderr)
        process.close()
        return 1
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)

    def stop() -> None:
        process.loop.stopping = True
        while True:
            try:
                if not wake_r.recv(64):
                    return
            except BlockingIOError:
                return

    process.loop.register(wake_r, stop)
    signal.set_wakeup_fd(wake_w.fileno())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        process.loop.run()
    except Exception:  # a bug, not a frame: every frame's faults are counted in the pipeline
        logging.getLogger("softswitch").exception("the event loop failed; the switch stops")
        process.close()
        # the gRPC pool's threads still serve open streams and would keep the process alive
        # (the controller would see a switch that refuses connections but never exits)
        os._exit(EXIT_LOOP_FAILED)
    finally:
        process.close()
        wake_w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
