"""The agent's control commands (status, register, write, verify, stats, qp_info, ...): the
requests a control socket client sends, answered from the endpoint and driver of one Agent.
Kept apart from host_agent.agent, which is the process around them (arguments, signals).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import random
import resource
import secrets
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from host_agent.control import Reply, RequestError
from host_agent.core import (
    DEFAULT_MTU,
    MAX_QPN,
    MIN_QPN,
    Event,
    EvStateChanged,
    FailReason,
    LocalProtocolError,
    MemoryRegion,
    MessageReceived,
    WriteCompleted,
    WriteFailed,
)
from host_agent.hostconfig import HostConfigError
from host_agent.modes import stripe
from wire import PSN_MAX, PSN_MOD

if TYPE_CHECKING:
    from host_agent.core import Endpoint
    from host_agent.driver import Driver
    from host_agent.hostconfig import HostConfig
    from host_agent.modes import AgentMode


class AgentParts(Protocol):
    """What the commands use of the agent (host_agent.agent.Agent): named here so that this
    module does not import the agent that imports it."""

    config: HostConfig
    mode: AgentMode
    endpoint: Endpoint
    driver: Driver

    def qpns(self, peer: int) -> list[int]: ...

log = logging.getLogger("host_agent")

WRITE_STATS = ("tx_data_packets", "retransmits", "timeouts", "spurious_timeouts",
               "nacks_received")
MAX_WRITE = 1 << 30  # bytes per write command: the pattern is built in memory
HISTORY = 10_000  # events and received messages kept for the `events` / `messages` commands
_MISSING = object()
_ROUTINE_EVENTS = (EvStateChanged, MessageReceived, WriteCompleted)


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

    def __init__(self, agent: AgentParts) -> None:
        self.agent = agent
        self.regions: dict[int, MemoryRegion] = {}
        self.pending: dict[tuple[int, int], PendingWrite] = {}
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.messages: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self._seq = 0
        self._evicted = 0  # seq of the newest message record the full log dropped
        self.table: dict[str, Callable[[dict[str, Any], Reply], dict[str, Any] | None]] = {
            "status": self.status, "register": self.register, "deregister": self.deregister,
            "write": self.write, "verify": self.verify, "messages": self.list_messages,
            "stats": self.stats, "counters": self.counters, "events": self.events,
            "view": self.view,
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
        # per-EV and per-message events are routine (one per write on a busy agent): DEBUG
        level = logging.DEBUG if isinstance(event, _ROUTINE_EVENTS) else logging.INFO
        if log.isEnabledFor(level):
            log.log(level, "event %s", json.dumps(record, default=str))
        if isinstance(event, MessageReceived):
            peer = self.agent.endpoint.connection(event.qpn).peer
            if len(self.messages) == self.messages.maxlen:
                self._evicted = self.messages[0]["seq"]
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
        after = self.agent.endpoint.counters()  # not stats(): that formats every EV's route
        delta = {k: after[k] - v for k, v in pending.stats_before.items()}
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
        counters = endpoint.counters()
        before = {k: counters[k] for k in WRITE_STATS}
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
        got = bytes(memoryview(region.buffer)[offset:offset + length])  # memcmp, not per item
        want = pattern(seed, length)
        first = None
        if got != want:
            first = offset + next(i for i in range(length) if got[i] != want[i])
        return {"match": first is None, "first_mismatch": first, "length": length}

    def list_messages(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """Records after `since`; `evicted_through` > since says some of them are gone (the
        log keeps HISTORY), so a caller knows its count is short instead of guessing."""
        since = _int_arg(request, "since", 0)
        return {"messages": [m for m in self.messages if m["seq"] > since],
                "evicted_through": self._evicted}

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

    def view(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """The counters and, when this host has exactly one QP to `peer` (an MRC agent's),
        its EVs' states and tx packets (with `paths`: their plane and route too): the run
        view's sample, a fraction of `stats`, opening nothing."""
        peer = _int_arg(request, "peer", high=255)
        qpns = self.agent.driver.adapter.qpns_of(peer) if peer in self.agent.driver.connected \
            else []
        evs = (self.agent.endpoint.ev_view(qpns[0], bool(request.get("paths")))
               if len(qpns) == 1 else {})
        return {"counters": self.agent.endpoint.counters(), "qpn": qpns[0] if qpns else None,
                "evs": {str(ev): v for ev, v in evs.items()}}

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
        remote_psn = _int_arg(request, "psn", high=PSN_MAX)
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
