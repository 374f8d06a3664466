"""Kernel TCP / MPTCP flows: a bounded socket server and client run inside Mininet hosts.

    python -m bench.contenders.kernel_flows server --bind ADDR [--bind ADDR...] --port P \\
        --proto tcp|mptcp --count N --timeout S
    python -m bench.contenders.kernel_flows client --src ADDR --dst ADDR --port P \\
        --proto tcp|mptcp --bytes N --timeout S

The client sends N bytes and closes its side; the server reads every connection to its end
and records, as the bytes arrive, (CLOCK_MONOTONIC time, cumulative bytes) samples - the
delivery timeline the stall and goodput-over-time figures are computed from. CLOCK_MONOTONIC
is one clock for every process on the machine, network namespaces included, so the bench
can place its failure injection on the same axis. The server prints "READY" once listening,
then, when every connection has ended, one JSON line per connection; the client prints
"CONNECTED" once connected, then one JSON line. Both give up after --timeout seconds, the
server also after --count connections: nothing is left running.
Servers bind only to the host's own NIC addresses given with --bind.
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from bench.errors import BenchmarkError

IPPROTO_MPTCP = 262  # Linux; socket.IPPROTO_MPTCP exists only from Python 3.10 on some builds
PROTOS = ("tcp", "mptcp")
SAMPLE_EVERY = 0.0005  # s: coalesce receive samples closer than this
MAX_SAMPLES = 200_000
CHUNK = 256 * 1024
MAX_BYTES = 1 << 34


class FlowError(BenchmarkError, RuntimeError):
    """A flow could not be set up (bad address, no MPTCP in this kernel, ...)."""


def make_socket(proto: str) -> socket.socket:
    if proto not in PROTOS:
        raise FlowError(f"proto {proto!r}: use one of {', '.join(PROTOS)}")
    number = IPPROTO_MPTCP if proto == "mptcp" else socket.IPPROTO_TCP
    try:
        return socket.socket(socket.AF_INET6, socket.SOCK_STREAM, number)
    except OSError as exc:
        raise FlowError(f"cannot open a {proto} socket: {exc} (is net.mptcp.enabled=1?)") from exc


def mptcp_enabled() -> tuple[bool, str]:
    """Whether this kernel offers MPTCP sockets, and if not, why (for the results file)."""
    try:
        with open("/proc/sys/net/mptcp/enabled", encoding="ascii") as f:
            if f.read().strip() != "1":
                return False, "sysctl net.mptcp.enabled is not 1"
    except OSError as exc:
        return False, f"no net.mptcp sysctl: {exc}"
    try:
        make_socket("mptcp").close()
    except FlowError as exc:
        return False, str(exc)
    return True, ""


def mptcp_host_commands(nics: list[tuple[str, str]], *, server: bool) -> list[list[str]]:
    """`ip mptcp` commands for one subflow per plane ((ifname, address) per NIC).

    The server announces every NIC address (signal endpoints); the client accepts the
    announcements and opens one subflow to each, from the source address routing picks - its
    NIC on the same plane. The client gets no `subflow` endpoints on purpose: those open
    subflows towards the server's *initial* address, which is on plane 0 and unreachable from
    another plane's NIC (each plane routes only its own prefixes).
    """
    extra = str(max(0, len(nics) - 1))
    cmds = [["ip", "mptcp", "endpoint", "flush"],
            ["ip", "mptcp", "limits", "set", "subflow", extra, "add_addr_accepted", extra]]
    if server:
        cmds += [["ip", "mptcp", "endpoint", "add", address, "dev", ifname, "signal"]
                 for ifname, address in nics]
    return cmds


@dataclass
class _Conn:
    sock: socket.socket
    peer: str
    start: float
    received: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)

    def record(self, now: float, final: bool = False) -> None:
        if (final or not self.samples or now - self.samples[-1][0] >= SAMPLE_EVERY) \
                and len(self.samples) < MAX_SAMPLES:
            self.samples.append((now, self.received))
        elif self.samples and (final or len(self.samples) >= MAX_SAMPLES):
            self.samples[-1] = (now, self.received)

    def report(self, end: float, complete: bool) -> dict[str, Any]:
        return {"role": "server", "peer": self.peer, "bytes": self.received, "start": self.start,
                "end": end, "complete": complete, "samples": self.samples}


def serve(binds: list[str], port: int, proto: str, count: int, timeout: float,
          out=sys.stdout) -> int:
    """Accept up to `count` connections on every bound address; print one JSON line each."""
    listeners = []
    sel = selectors.DefaultSelector()
    try:
        for address in binds:
            sock = make_socket(proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError as exc:
                sock.close()
                raise FlowError(f"cannot bind [{address}]:{port}: {exc}") from exc
            sock.listen(count)
            sock.setblocking(False)
            listeners.append(sock)
            sel.register(sock, selectors.EVENT_READ, None)
        print("READY", file=out, flush=True)
        deadline = time.monotonic() + timeout
        accepted = done = 0
        conns: list[_Conn] = []
        reports: list[dict[str, Any]] = []
        while done < count and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
                if key.data is None:
                    csock, addr = key.fileobj.accept()  # type: ignore[union-attr]
                    csock.setblocking(False)
                    accepted += 1
                    conn = _Conn(csock, addr[0], time.monotonic())
                    conns.append(conn)
                    sel.register(csock, selectors.EVENT_READ, conn)
                    if accepted >= count:
                        for ls in listeners:
                            sel.unregister(ls)
                    continue
                conn = key.data
                try:
                    data = conn.sock.recv(CHUNK)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                now = time.monotonic()
                if data:
                    conn.received += len(data)
                    conn.record(now)
                    continue
                conn.record(now, final=True)
                sel.unregister(conn.sock)
                conn.sock.close()
                reports.append(conn.report(now, True))
                conns.remove(conn)
                done += 1
        for conn in conns:  # timed out: report what arrived
            reports.append(conn.report(time.monotonic(), False))
            conn.sock.close()
        # Reports go out only now: the reader may not read before its clients finish, and a
        # full pipe must not stop this loop from reading (and closing) the other connections.
        for report in reports:
            print(json.dumps(report), file=out, flush=True)
        return 0 if done >= count else 1
    finally:
        for sock in listeners:
            sock.close()
        sel.close()


def send(src: str, dst: str, port: int, proto: str, nbytes: int, timeout: float,
         out=sys.stdout) -> int:
    """Send nbytes from address src to [dst]:port; print one JSON line."""
    sock = make_socket(proto)
    sock.settimeout(timeout)
    start = time.monotonic()
    sent = 0
    error = None
    connected: float | None = None
    mss: int | None = None
    try:
        sock.bind((src, 0))
        sock.connect((dst, port))
        connected = time.monotonic()
        print("CONNECTED", file=out, flush=True)
        try:
            mss = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
        except OSError:  # an MPTCP socket may not answer TCP-level options
            mss = None
        block = bytes(CHUNK)
        view = memoryview(block)
        while sent < nbytes:
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"sent {sent} of {nbytes} bytes in {timeout} s")
            sent += sock.send(view[:min(CHUNK, nbytes - sent)])
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):  # the server closes after reading everything
            pass
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        sock.close()
    end = time.monotonic()
    print(json.dumps({"role": "client", "src": src, "dst": dst, "proto": proto, "bytes": sent,
                      "start": start, "connected": connected, "end": end, "mss": mss,
                      "ok": error is None,
                      "error": error}), file=out, flush=True)
    return 0 if error is None else 1


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.contenders.kernel_flows", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("server")
    s.add_argument("--bind", action="append", required=True, help="own NIC address")
    s.add_argument("--count", type=_positive(int), default=1)
    c = sub.add_parser("client")
    c.add_argument("--src", required=True)
    c.add_argument("--dst", required=True)
    c.add_argument("--bytes", type=_positive(int), required=True)
    for q in (s, c):
        q.add_argument("--port", type=int, required=True)
        q.add_argument("--proto", choices=PROTOS, default="tcp")
        q.add_argument("--timeout", type=_positive(float), default=60.0)
    args = p.parse_args(argv)
    try:
        if args.role == "server":
            return serve(args.bind, args.port, args.proto, args.count, args.timeout)
        if args.bytes > MAX_BYTES:
            p.error(f"--bytes at most {MAX_BYTES}")
        return send(args.src, args.dst, args.port, args.proto, args.bytes, args.timeout)
    except FlowError as exc:
        print(f"kernel_flows: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
