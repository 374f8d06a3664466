"""`python -m softswitch`: a software switch started like simple_switch_grpc.

    python -m softswitch -i 1@veth1 -i 2@veth2 --device-id 1 \\
        --grpc-server-addr 127.0.0.1:20001 --thrift-port 9091 --priority-queues 2 --no-p4

The pipeline arrives over P4Runtime (SetForwardingPipelineConfig). `--thrift-port`
names the loopback TCP port of the runtime control socket (JSON lines, see
softswitch/cli.py), the counterpart of BMv2's Thrift runtime CLI.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import socket
import sys
from pathlib import Path

import grpc
from p4.v1 import p4runtime_pb2

from p4rt.p4info import load_text as load_p4info
from p4rt.tls import TlsError, read_private, server_credentials
from softswitch.dataplane import Dataplane
from softswitch.errors import P4RTError
from softswitch.server import Device, serve

LOG_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
              "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR,
              "critical": logging.CRITICAL, "off": logging.CRITICAL + 10}


class ConfigError(ValueError):
    """Bad command line; the message says what to fix."""


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
    if not sep or not port.isdigit():
        raise ConfigError(f"--grpc-server-addr {addr!r} must be HOST:PORT")
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
    p.add_argument("--p4info", default=None,
                   help="preload this P4Info (text format) instead of waiting for one")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        ports = dict(parse_interface(i) for i in args.interface)
        if len(ports) != len(args.interface):
            raise ConfigError("the same port number is given twice in -i")
        address = parse_loopback(args.grpc_server_addr)
        if not 1 <= args.priority_queues <= 8:
            raise ConfigError("--priority-queues must be 1..8")
        credentials = _server_tls(args)
        token = read_private(args.control_token_file).decode().strip() \
            if args.control_token_file else None
    except (ConfigError, TlsError) as err:
        print(f"softswitch: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=LOG_LEVELS[args.log_level],
                        format=f"softswitch[{args.device_id}] %(levelname)s %(name)s: %(message)s")
    dataplane = Dataplane(ports, args.priority_queues)
    device = Device(args.device_id, dataplane.set_state, stats=dataplane.stats)
    try:
        dataplane.open_ports()
        if args.thrift_port is not None:
            dataplane.open_control(args.thrift_port, token)
        if args.p4info:
            device.commit(p4runtime_pb2.ForwardingPipelineConfig(
                p4info=load_p4info(Path(args.p4info))))
        server = serve(device, address, credentials)
    except (OSError, P4RTError) as err:
        print(f"softswitch: {err}", file=sys.stderr)
        dataplane.close()
        return 1
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)

    def stop() -> None:
        dataplane.stopping = True
        while True:
            try:
                if not wake_r.recv(64):
                    return
            except BlockingIOError:
                return

    dataplane.add_wakeup(wake_r, stop)
    signal.set_wakeup_fd(wake_w.fileno())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    logging.getLogger("softswitch").info("ports %s, P4Runtime on %s", ports, address)
    try:
        dataplane.run()
    finally:
        server.stop(grace=0.5).wait()
        dataplane.close()
        wake_w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
