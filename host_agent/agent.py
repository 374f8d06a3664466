"""One MRC host agent process: an Endpoint on the host's NICs plus a local control socket.

    python -m host_agent.agent --host 0 --planes 4 --t0 2 --t1 2 --hosts-per-t0 2 \\
        --socket /tmp/h0.sock [--paths paths.json] [--log h0.log]

Start one per host inside the host's network namespace (Mininet: host.popen(...)); drive it
with `python -m host_agent.cli --socket PATH ...` or control.ControlClient. It runs until
SIGTERM, SIGINT or the `shutdown` command, then closes its sockets and removes the socket file.

Conventions:
- QPNs: with --exchange-qps (what topologies.network runs), each QP's QPN and initial PSN come
  from `secrets` and are exchanged out of band through the control sockets (qp_info on both
  sides, then qp_connect with the other's answer), as RC applications exchange them over TCP;
  only exchanged QPs take packets. Without it (a hand-run agent), the QP towards peer P is
  0x100 + P with PSNs from 0 (hostconfig.qpn_for), opened on the first command naming a peer
  or the first packet from it (--connect-all opens them all at start).
- Modes (host_agent.modes): `--mode mrc` sprays one QP per peer; `--mode roce[:K]` opens K QPs
  per peer (default one per plane), each pinned to a plane and hashed by ECMP, and stripes
  every write over them; `single_port` is roce with one QP, on plane 0. qp_info/qp_connect
  take the QP's `lane`.
- Test pattern: `write` sends random.Random(seed).randbytes(n); `verify` on the receiver
  regenerates it from the same seed and compares byte for byte.

Kernel interference: see host_agent.nic.kernel_setup.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import logging
import os
import random
import resource
import secrets
import signal
import socket
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from fabric import hostpaths
from fabric.topology import Fabric, TopologyError
from host_agent.control import ControlServer, Reply, RequestError
from host_agent.core import (
    DEFAULT_MTU,
    MAX_QPN,
    MIN_QPN,
    Endpoint,
    EndpointConfig,
    EvConfig,
    Event,
    EvStateChanged,
    FailReason,
    LocalProtocolError,
    MemoryRegion,
    MessageReceived,
    RecoveryMode,
    WriteCompleted,
    WriteFailed,
)
from host_agent.driver import Driver
from host_agent.hostconfig import HostConfig, HostConfigError
from host_agent.modes import MODE_HELP, MRC_MODE, AgentMode, stripe
from host_agent.nic import NicError, kernel_setup
from wire import PSN_MOD

log = logging.getLogger("host_agent")

DEFAULT_BASE_RTT = 0.005  # room for Python and BMv2 delays (docs/decisions.md, "Base RTT")
WRITE_STATS = ("tx_data_packets", "retransmits", "timeouts", "spurious_timeouts",
               "nacks_received")
MAX_WRITE = 1 << 30  # bytes per write command: the pattern is built in memory
HISTORY = 10_000  # events and received messages kept for the `events` / `messages` commands
_MISSING = object()


def pattern(seed: int, length: int) -> bytes:
    return random.Random(seed).randbytes(length)


def _int_arg(request: dict[str, Any], name: str, default: Any = _MISSING, *, low: int = 0,
             high: int = (1 << 64) - 1) -> Any:
    value = request.get(name, default)
    if value is _MISSING:
        raise RequestError(f"{request['cmd']}: missing argument {name!r}")
    if value is default and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"{request['cmd']}: {name}={value!r} must be an int in {low}..{high}")
    return value


def _event_record(seq: int, now: float, event: Event) -> dict[str, Any]:
    record: dict[str, Any] = {"seq": seq, "time": now, "type": type(event).__name__}
    for f in dataclasses.fields(event):  # type: ignore[arg-type]
        value = getattr(event, f.name)  # events hold plain values: no deep copy (asdict) needed
        record[f.name] = value.name if isinstance(value, enum.Enum) else value
    return record


@dataclasses.dataclass
class PendingWrite:
    """One write command: its parts (one per lane it was striped over) still outstanding."""

    reply: Reply
    peer: int
    length: int
    start: float
    stats_before: dict[str, int]
    timer: Any
    parts: set[tuple[int, int]]  # (local QPN, wr_id)


class Commands:
    """The control commands; each returns a response dict, or None when it answers later."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.regions: dict[int, MemoryRegion] = {}
        self.pending: dict[tuple[int, int], PendingWrite] = {}
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.messages: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self._seq = 0
        self.table: dict[str, Callable[[dict[str, Any], Reply], dict[str, Any] | None]] = {
            "status": self.status, "register": self.register, "deregister": self.deregister,
            "write": self.write, "verify": self.verify, "messages": self.list_messages,
            "stats": self.stats, "counters": self.counters, "events": self.events,
            "deny": self.deny, "allow": self.allow,
            "shutdown": self.shutdown, "qp_info": self.qp_info, "qp_connect": self.qp_connect,
        }
        self.offers: dict[tuple[int, int], tuple[int, int]] = {}  # (peer, lane) -> (QPN, PSN)

    def handle(self, request: dict[str, Any], reply: Reply) -> None:
        command = self.table.get(request["cmd"])
        if command is None:
            raise RequestError(f"unknown command {request['cmd']!r}: use one of "
                               f"{', '.join(sorted(self.table))}")
        try:
            result = command(request, reply)
        except (LocalProtocolError, HostConfigError) as exc:
            raise RequestError(f"{request['cmd']}: {exc}") from exc
        if result is not None:
            reply({"ok": True, **result})

    # ---- events from the endpoint ------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        now = self.agent.driver.clock()
        self._seq += 1
        record = _event_record(self._seq, now, event)
        self.history.append(record)
        level = logging.DEBUG if isinstance(event, EvStateChanged) else logging.INFO
        if log.isEnabledFor(level):
            log.log(level, "event %s", json.dumps(record, default=str))
        if isinstance(event, MessageReceived):
            peer = self.agent.endpoint.connection(event.qpn).peer
            self.messages.append({**record, "peer": peer})
        elif isinstance(event, (WriteCompleted, WriteFailed)):
            pending = self.pending.pop((event.qpn, event.wr_id), None)
            if pending is None:
                return
            pending.parts.discard((event.qpn, event.wr_id))
            if isinstance(event, WriteFailed) or not pending.parts:
                for key in pending.parts:  # the write has failed: its other parts are moot
                    self.pending.pop(key, None)
                pending.timer.cancel()
                self._finish(pending, event, now)

    def _finish(self, pending: PendingWrite, event: Event, now: float) -> None:
        if isinstance(event, WriteFailed):
            reason = FailReason(event.reason)
            why = ("refused by the peer" if reason in (FailReason.RKEY_VIOLATION,
                                                       FailReason.BOUNDS_VIOLATION)
                   else "failed with its QP, which sends nothing more")
            pending.reply({"ok": False, "error": f"write to host {pending.peer} {why}: "
                                                 f"{reason.name} ({reason.value:#x})"})
            return
        duration = max(now - pending.start, 1e-9)
        after = self.agent.endpoint.stats()
        delta = {k: int(after[k]) - v for k, v in pending.stats_before.items()}  # type: ignore
        pending.reply({"ok": True, "peer": pending.peer, "bytes": pending.length,
                       "duration_s": duration, "goodput_gbps": pending.length * 8 / duration / 1e9,
                       **delta})

    def fail_pending(self, reason: str) -> None:
        for pending in {id(p): p for p in self.pending.values()}.values():
            pending.timer.cancel()
            pending.reply({"ok": False, "error": reason})
        self.pending.clear()

    # ---- commands ----------------------------------------------------------------------------

    def status(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        driver, config = self.agent.driver, self.agent.config
        return {
            "host": config.host, "planes": config.planes, "pid": os.getpid(),
            "planes_up": driver.plane_up,
            "nics": [{"plane": n.plane, "ifname": n.ifname, "mac": n.mac,
                      "address": str(n.address)} for n in config.nics],
            "peers": sorted(config.paths), "connected": sorted(driver.connected),
            "mode": self.agent.mode.name, "lanes": self.agent.mode.qps,
            "qps": {str(p): driver.adapter.qpns_of(p) for p in sorted(driver.connected)},
            "regions": [{"va": r.va, "rkey": r.rkey, "length": r.length}
                        for r in self.regions.values()],
            "pending_writes": len({id(p) for p in self.pending.values()}),
        }

    def register(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        size = _int_arg(request, "size", low=1, high=MAX_WRITE)
        region = self.agent.endpoint.register_memory(size)
        self.regions[region.rkey] = region
        return {"va": region.va, "rkey": region.rkey, "length": region.length}

    def deregister(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        rkey = _int_arg(request, "rkey", high=(1 << 32) - 1)
        self.agent.endpoint.deregister_memory(rkey)
        self.regions.pop(rkey, None)
        return {"rkey": rkey}

    def write(self, request: dict[str, Any], reply: Reply) -> None:
        peer = _int_arg(request, "peer", high=255)
        length = _int_arg(request, "bytes", low=1, high=MAX_WRITE)
        va = _int_arg(request, "va")
        rkey = _int_arg(request, "rkey", high=(1 << 32) - 1)
        seed = _int_arg(request, "seed", 0)
        imm = _int_arg(request, "imm", None, high=(1 << 32) - 1)
        timeout = request.get("timeout", 120.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise RequestError(f"write: timeout={timeout!r} must be a positive number of seconds")
        driver, endpoint = self.agent.driver, self.agent.endpoint
        qpns = self.agent.qpns(peer)
        data = pattern(seed, length)
        stats = endpoint.stats()
        before = {k: int(stats[k]) for k in WRITE_STATS}  # type: ignore[call-overload]
        start = driver.clock()
        parts = stripe(length, len(qpns), DEFAULT_MTU)
        if imm is not None and len(parts) > 1:
            raise RequestError("write: imm with a write striped over several QPs would reach "
                               "the peer once per part; use one QP (mode mrc or single_port)")
        keys = set()
        for qpn, (off, size) in zip(qpns, parts, strict=False):
            wr_id = endpoint.post_write(qpn, data[off:off + size], va + off, rkey, imm=imm,
                                        now=start)
            keys.add((qpn, wr_id))
        pending = PendingWrite(reply, peer, length, start, before, None, set(keys))
        pending.timer = driver.loop.call_at(start + timeout,
                                            lambda: self._timeout(pending, timeout))
        for key in keys:
            self.pending[key] = pending
        return None

    def _timeout(self, pending: PendingWrite, timeout: float) -> None:
        if not pending.parts or self.pending.get(next(iter(pending.parts))) is not pending:
            return
        for key in pending.parts:
            self.pending.pop(key, None)
        pending.reply({"ok": False, "error": f"write to host {pending.peer} not complete "
                                             f"after {timeout} s (it keeps running)"})

    def verify(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        rkey = _int_arg(request, "rkey", high=(1 << 32) - 1)
        length = _int_arg(request, "length", low=1, high=MAX_WRITE)
        seed = _int_arg(request, "seed", 0)
        offset = _int_arg(request, "offset", 0)
        region = self.regions.get(rkey)
        if region is None:
            raise RequestError(f"verify: no region with rkey {rkey:#x} registered here")
        if offset + length > region.length:
            raise RequestError(f"verify: [{offset}, +{length}) exceeds the region's "
                               f"{region.length} bytes")
        got = memoryview(region.buffer)[offset:offset + length]
        want = pattern(seed, length)
        first = None
        if got != want:
            first = offset + next(i for i in range(length) if got[i] != want[i])
        return {"match": first is None, "first_mismatch": first, "length": length}

    def list_messages(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        since = _int_arg(request, "since", 0)
        return {"messages": [m for m in self.messages if m["seq"] > since]}

    def events(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        since = _int_arg(request, "since", 0)
        return {"events": [e for e in self.history if e["seq"] > since], "last": self._seq}

    def stats(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        endpoint, driver = self.agent.endpoint, self.agent.driver
        stats = endpoint.stats()
        per_ev = stats.pop("per_ev")
        summary: dict[str, dict[str, dict[str, int]]] = {}
        for qpn, evs in per_ev.items():  # type: ignore[attr-defined]
            by_plane: dict[str, dict[str, int]] = {}
            for info in evs.values():
                counts = by_plane.setdefault(str(info["plane"]), {})
                counts[info["state"]] = counts.get(info["state"], 0) + 1
            summary[f"{qpn:#x}"] = by_plane
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result: dict[str, Any] = {
            "endpoint": stats, "driver": driver.driver_stats(), "ev_states": summary,
            "planes_up": driver.plane_up,
            "peer_planes_up": {p: sorted(endpoint.peer_planes_up(p)) for p in driver.connected},
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "max_timer_lateness_s": driver.max_timer_lateness,
            "wakeups": driver.loop.wakeups,
            "per_route": driver.route_stats(),
            "mode": self.agent.mode.name,
            "recovery": str(endpoint.config.recovery),
            "reorder_window_s": endpoint.config.reorder_window,
        }
        if request.get("per_ev"):
            result["per_ev"] = {f"{qpn:#x}": evs for qpn, evs in per_ev.items()}  # type: ignore
        return result

    def counters(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """The endpoint's counters and the agent's clock, without the per-plane, per-EV and
        kernel figures of `stats`: cheap enough to poll during a transfer (the demo's
        goodput timeline)."""
        return {"time": self.agent.driver.clock(), "counters": self.agent.endpoint.counters()}

    def _set_denied(self, request: dict[str, Any], denied: bool) -> dict[str, Any]:
        peer = _int_arg(request, "peer", high=255)
        ev = _int_arg(request, "ev", high=(1 << 32) - 1)
        qpn = self.agent.qpns(peer)[0]
        self.agent.endpoint.set_ev_denied(qpn, ev, denied)
        return {"peer": peer, "ev": ev, "state": self.agent.endpoint.ev_states(qpn)[ev].name}

    def deny(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        return self._set_denied(request, True)

    def allow(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        return self._set_denied(request, False)

    def qp_info(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """This side's half of an out-of-band QP exchange (as RC applications do over TCP):
        a QPN and an initial PSN from `secrets`, kept until qp_connect uses them."""
        peer, lane = self._peer(request), self._lane(request)
        if (peer, lane) not in self.offers:
            adapter = self.agent.driver.adapter
            in_use = {q for p in self.agent.config.paths for q in adapter.qpns_of(p)}
            in_use |= {qpn for qpn, _ in self.offers.values()}
            qpn = MIN_QPN + secrets.randbelow(MAX_QPN - MIN_QPN + 1)
            while qpn in in_use:
                qpn = MIN_QPN + secrets.randbelow(MAX_QPN - MIN_QPN + 1)
            self.offers[(peer, lane)] = (qpn, secrets.randbelow(PSN_MOD))
        qpn, psn = self.offers[(peer, lane)]
        return {"peer": peer, "lane": lane, "qpn": qpn, "psn": psn}

    def qp_connect(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """Open the QP to `peer` with the peer's qp_info (replacing an open one: the peer
        restarted); this side's own half is the one qp_info offered."""
        peer, lane = self._peer(request), self._lane(request)
        remote_qpn = _int_arg(request, "qpn", low=MIN_QPN, high=MAX_QPN)
        remote_psn = _int_arg(request, "psn", high=PSN_MOD - 1)
        if (peer, lane) not in self.offers:
            raise RequestError(f"qp_connect: no qp_info offered to h{peer} lane {lane}: "
                               "call it first")
        qpn, psn = self.offers.pop((peer, lane))
        self.agent.driver.adapter.connect(peer, qpn, remote_qpn, lane=lane, initial_psn=psn,
                                          expected_psn=remote_psn)
        return {"peer": peer, "lane": lane, "qpn": qpn}

    def _lane(self, request: dict[str, Any]) -> int:
        return _int_arg(request, "lane", 0, high=self.agent.mode.qps - 1)

    def _peer(self, request: dict[str, Any]) -> int:
        peer = _int_arg(request, "peer", high=255)
        if peer not in self.agent.config.paths:
            raise RequestError(f"{request['cmd']}: h{peer} is not a peer of this host (peers: "
                               f"{sorted(self.agent.config.paths)})")
        return peer

    def shutdown(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        self.agent.driver.stop()
        return {"host": self.agent.config.host}


class Agent:
    """Wires the endpoint, the driver, the control server and signals together."""

    def __init__(self, config: HostConfig, endpoint_config: EndpointConfig, socket_path: str,
                 seed: int | None, mode: AgentMode = MRC_MODE, exchange: bool = False) -> None:
        self.config = config
        self.exchange = exchange
        self.mode = mode
        self.endpoint = Endpoint(endpoint_config, planes=config.planes,
                                 name=f"h{config.host}", seed=seed)
        self.commands = Commands(self)
        self.driver = Driver(self.endpoint, config, on_event=self.commands.on_event, mode=mode)
        self.driver.adapter.accept_peers = not exchange  # only exchanged QPs take packets
        self.socket_path = socket_path
        self._wake_r, self._wake_w = socket.socketpair()

    def qpns(self, peer: int) -> list[int]:
        """The local QPNs to `peer` by lane: the exchanged ones, or (without --exchange-qps)
        opened by the QPN convention on first use."""
        if not self.exchange:
            return self.driver.ensure_connected(peer)
        qpns = self.driver.adapter.qpns_of(peer)
        if len(qpns) < self.mode.qps:
            raise RequestError(f"{len(qpns)} of {self.mode.qps} QPs to h{peer} open: with "
                               "--exchange-qps, QPs open only through qp_info/qp_connect")
        return qpns

    def run(self, connect_all: bool) -> None:
        self.driver.open()
        server = None
        old_wakeup = -1
        try:
            if connect_all and not self.exchange:
                for peer in sorted(self.config.paths):
                    self.driver.ensure_connected(peer)
            server = ControlServer(self.socket_path, self.driver.loop, self.commands.handle)
            for sock in (self._wake_r, self._wake_w):
                sock.setblocking(False)
            old_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
            self.driver.loop.add_reader(self._wake_r, self._drain_wakeup)
            log.info("host %d agent ready on %s", self.config.host, self.socket_path)
            self.driver.run()
        finally:
            self.commands.fail_pending("the agent is shutting down")
            if server is not None:
                server.close()
            signal.set_wakeup_fd(old_wakeup)
            self.driver.close()
            self._wake_r.close()
            self._wake_w.close()
            log.info("host %d agent stopped", self.config.host)

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.info("signal %d: shutting down", signum)
        self.driver.stop()

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except (BlockingIOError, InterruptedError):
            return


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = Fabric()
    p = argparse.ArgumentParser(prog="python -m host_agent.agent", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", type=int, required=True, help="this host's global index")
    p.add_argument("--paths", help="path-set JSON (fabric.hostpaths.export); "
                   "overrides the fabric parameters")
    p.add_argument("--planes", type=int, default=defaults.planes)
    p.add_argument("--t0", type=int, default=defaults.t0_per_plane, help="T0 switches per plane")
    p.add_argument("--t1", type=int, default=defaults.t1_per_plane, help="T1 switches per plane")
    p.add_argument("--hosts-per-t0", type=int, default=defaults.hosts_per_t0)
    p.add_argument("--socket", required=True, help="control socket path")
    p.add_argument("--log", help="log file (default: stderr)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING"))
    p.add_argument("--base-rtt", type=float, default=DEFAULT_BASE_RTT,
                   help="base RTT in seconds, including the agents' own processing; scales "
                   f"every core timer (EndpointConfig.for_base_rtt). Default {DEFAULT_BASE_RTT}")
    p.add_argument("--seed", type=int,
                   help="INSECURE, for reproducible experiments only: derive rkeys, addresses "
                        "and EV tags from this seed, so anyone who knows it can forge them "
                        "(default: the OS's cryptographic source)")
    p.add_argument("--keep-ipv6", action="store_true",
                   help="keep kernel IPv6 on the NICs (kernel TCP baselines), quietened")
    p.add_argument("--no-kernel-setup", action="store_true",
                   help="leave sysctls and offloads alone")
    p.add_argument("--write-timeout", type=float, default=EndpointConfig.write_timeout,
                   help="seconds a QP's outstanding writes may go without any data acknowledged "
                        "before they fail, and the QP with them (default %(default)s)")
    p.add_argument("--connect-all", action="store_true", help="open QPs to every peer at start")
    p.add_argument("--exchange-qps", action="store_true",
                   help="QPNs and initial PSNs from secrets, exchanged out of band through the "
                   "control socket (qp_info/qp_connect) instead of the 0x100+host convention")
    p.add_argument("--mode", default="mrc", help=MODE_HELP)
    return p.parse_args(argv)


def load_host_config(args: argparse.Namespace) -> HostConfig:
    if args.paths:
        with open(args.paths, encoding="utf-8") as f:
            fabric, paths = hostpaths.load(f.read())
    else:
        fabric = Fabric(args.planes, args.t0, args.t1, args.hosts_per_t0)
        paths = list(hostpaths.all_host_paths(fabric, args.host))
    if not 0 <= args.host < fabric.hosts:
        raise HostConfigError(f"--host {args.host}: the fabric has hosts 0..{fabric.hosts - 1}")
    return HostConfig.from_paths(args.host, fabric.planes, paths)


def roce_endpoint_config(base_rtt: float, **overrides: Any) -> EndpointConfig:
    """Per QP: one EV, no backups, the floor at one EV (a failed path keeps being retried, as
    in RoCE), go-back-N recovery."""
    ev = EvConfig.for_base_rtt(base_rtt, evs_per_connection=1, backups_per_plane=0,
                               ev_min_active=1)
    return EndpointConfig.for_base_rtt(base_rtt, ev=ev, recovery=RecoveryMode.GO_BACK_N,
                                       **overrides)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        filename=args.log, level=args.log_level,
        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_host_config(args)
        mode = AgentMode.parse(args.mode, config.planes)
        if not mode.is_mrc:
            endpoint_config = roce_endpoint_config(args.base_rtt,
                                                   write_timeout=args.write_timeout)
        else:
            endpoint_config = EndpointConfig.for_base_rtt(args.base_rtt,
                                                          write_timeout=args.write_timeout)
        if not args.no_kernel_setup:
            for nic in config.nics:
                kernel_setup(nic.ifname, args.keep_ipv6)
        if args.seed is not None:
            log.warning("--seed %d: keys and EV tags are predictable (reproducible run, "
                        "insecure)", args.seed)
        Agent(config, endpoint_config, args.socket, args.seed, mode,
              args.exchange_qps).run(args.connect_all)
    except (NicError, TopologyError, ValueError, OSError) as exc:
        log.error("%s", exc)
        print(f"host agent: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.umask(0o077)  # the control socket lets anyone who can open it drive the host
    sys.exit(main())
