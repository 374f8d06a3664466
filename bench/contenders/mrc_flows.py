"""MRC and single-path flows through the host agents, with a delivery timeline per flow.

An agent `write` answers only when the whole message is acknowledged, so one big write says
nothing about *when* its bytes arrived. A flow here is therefore a sequence of CHUNK-byte
writes into one registered region, kept DEPTH deep on one control connection
(ControlClient.submit/next_reply), like an RDMA application posting many work requests on one
QP. The receiving agent records a MessageReceived (with its CLOCK_MONOTONIC time) per chunk:
those records are the timeline. Every chunk has its own pattern seed and is verified byte for
byte at the receiver after the flow. Agent modes (MRC or single-path) are whatever the agents
run; MrcNetwork decides that.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from host_agent.control import ControlClient, ControlError

CHUNK = 16 * 1024
DEPTH = 8
MESSAGE_POLL_S = 1.0  # how often a flow reads its receiver's message records (MessageReader)
SENDER_STATS = ("retransmits", "timeouts", "spurious_timeouts", "nacks_received",
                "tx_data_packets")
RECEIVER_STATS = ("trims_received", "nacks_sent", "duplicates")
_seeds = itertools.count(1_000_000, 10_000)


@dataclass(frozen=True)
class FlowSpec:
    src: int
    dst: int
    nbytes: int


def _delta(after: dict[str, Any], before: dict[str, Any], keys: tuple[str, ...]) -> dict[str, int]:
    return {k: int(after[k]) - int(before[k]) for k in keys}


def run_flow(net, spec: FlowSpec, *, timeout: float, chunk: int = CHUNK,
             depth: int = DEPTH, on_start: Callable[[], None] | None = None) -> dict[str, Any]:
    """Drive one flow to completion (or its timeout) and return its measurements.

    Times (start, end, timeline) are CLOCK_MONOTONIC seconds; timeline times are relative to
    `start`. Counter deltas are host totals, so concurrent flows on a host share them.
    `on_start` runs at `start`, after the flow's set-up calls and before its first write.
    """
    src, dst = net.agent(spec.src), net.agent(spec.dst)
    region = dst.call("register", size=spec.nbytes)
    result: dict[str, Any] = {"src": spec.src, "dst": spec.dst, "bytes": spec.nbytes,
                              "ok": False, "error": None}
    base_seed = next(_seeds)
    try:
        since = dst.call("events", since=(1 << 62))["last"]
        src_before, dst_before = src.call("stats")["endpoint"], dst.call("stats")["endpoint"]
        start = time.monotonic()
        if on_start is not None:
            on_start()
        with MessageReader(dst, since) as reader:
            errors = post_chunks(src, spec, region, base_seed, timeout=timeout, chunk=chunk,
                                 depth=depth)
            end = time.monotonic()
        messages = reader.records
        if reader.overflowed:
            errors.append("the receiver's message log overflowed between two reads: its "
                          "timeline is incomplete")
        result.update(_stats_deltas(src.call("stats")["endpoint"], src_before,
                                    dst.call("stats")["endpoint"], dst_before))
        timeline, got = [], 0
        for m in sorted((m for m in messages if m["peer"] == spec.src),
                        key=lambda m: m["time"]):
            got += m["length"]
            timeline.append((m["time"] - start, got))
        bad = verify_chunks(dst, spec, region, base_seed, chunk) if not errors else None
        if bad is not None:
            errors.append(f"receiver found a mismatch in chunk at byte {bad}")
        duration = end - start
        complete = got >= spec.nbytes and not errors
        result.update(ok=complete, error="; ".join(errors[:3]) or None, start=start, end=end,
                      duration_s=duration, delivered=got, timeline=timeline,
                      goodput_bps=got * 8 / duration if duration > 0 else 0.0,
                      completion_s=timeline[-1][0] if complete and timeline else None)
    finally:
        dst.call("deregister", rkey=region["rkey"])
    return result


class MessageReader:
    """The receiver's MessageReceived records for one flow, read every MESSAGE_POLL_S while it
    runs and once more at the end: the agent keeps only its last HISTORY records, fewer than
    a long striped flow delivers (a 100 MB roce flow: 25,000 parts)."""

    def __init__(self, dst: Any, since: int) -> None:
        self._dst, self._since = dst, since
        self.records: list[dict[str, Any]] = []
        self.overflowed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MessageReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()

    def _run(self) -> None:
        while not self._stop.wait(MESSAGE_POLL_S):
            self._read()

    def _read(self) -> None:
        answer = self._dst.call("messages", since=self._since)
        if answer.get("evicted_through", 0) > self._since:
            self.overflowed = True
        for m in answer["messages"]:
            self.records.append(m)
            self._since = max(self._since, m["seq"])


def post_chunks(src, spec: FlowSpec, region: dict[str, Any], base_seed: int, *, timeout: float,
                chunk: int = CHUNK, depth: int = DEPTH) -> list[str]:
    """Write spec.nbytes into `region` as CHUNK-byte writes kept DEPTH deep on one control
    connection (chunk i with pattern seed base_seed + i); the errors, empty when all went."""
    errors: list[str] = []
    try:
        with ControlClient(str(src.socket_path), timeout + 30) as pipe:
            todo = iter(enumerate(range(0, spec.nbytes, chunk)))
            outstanding = 0
            for i, off in itertools.islice(todo, depth):
                pipe.submit("write", **_write(spec, region, i, off, chunk, base_seed, timeout))
                outstanding += 1
            while outstanding:
                _, answer = pipe.next_reply()
                outstanding -= 1
                if not answer.get("ok"):
                    errors.append(str(answer.get("error")))
                nxt = next(todo, None)
                if nxt is not None and not errors:
                    pipe.submit("write", **_write(spec, region, nxt[0], nxt[1], chunk,
                                                  base_seed, timeout))
                    outstanding += 1
    except ControlError as exc:
        errors.append(f"control connection: {exc}")
    return errors


def _write(spec: FlowSpec, region: dict[str, Any], i: int, off: int, chunk: int,
           base_seed: int, timeout: float) -> dict[str, Any]:
    return {"peer": spec.dst, "bytes": min(chunk, spec.nbytes - off),
            "va": region["va"] + off, "rkey": region["rkey"], "seed": base_seed + i,
            "timeout": timeout}


def verify_chunks(dst, spec: FlowSpec, region: dict[str, Any], base_seed: int,
                  chunk: int = CHUNK) -> int | None:
    """First byte offset of a chunk that does not match its pattern, or None."""
    for i, off in enumerate(range(0, spec.nbytes, chunk)):
        check = dst.call("verify", rkey=region["rkey"], length=min(chunk, spec.nbytes - off),
                         seed=base_seed + i, offset=off)
        if not check["match"]:
            return check["first_mismatch"]
    return None


def _stats_deltas(src_after: dict, src_before: dict, dst_after: dict, dst_before: dict
                  ) -> dict[str, int]:
    out = _delta(src_after, src_before, SENDER_STATS)
    out["nacks"] = out.pop("nacks_received")
    out.update(_delta(dst_after, dst_before, RECEIVER_STATS))
    out["trims"] = out.pop("trims_received")
    return out


def run_flows(net, specs: list[FlowSpec], *, timeout: float, chunk: int = CHUNK,
              depth: int = DEPTH, on_start: Callable[[], None] | None = None
              ) -> list[dict[str, Any]]:
    """Run flows concurrently (one thread each); results in the order of `specs`.
    `on_start` runs once, when the first flow starts."""
    results: list[dict[str, Any] | None] = [None] * len(specs)
    first = threading.Lock()
    started = False

    def starting() -> None:
        nonlocal started
        with first:
            if started:
                return
            started = True
        if on_start is not None:
            on_start()

    def one(i: int, spec: FlowSpec) -> None:
        try:
            results[i] = run_flow(net, spec, timeout=timeout, chunk=chunk, depth=depth,
                                  on_start=starting)
        except Exception as exc:  # one broken flow must not hide the others' results
            results[i] = {"src": spec.src, "dst": spec.dst, "bytes": spec.nbytes, "ok": False,
                          "error": f"{type(exc).__name__}: {exc}", "timeline": []}

    threads = [threading.Thread(target=one, args=(i, s), daemon=True)
               for i, s in enumerate(specs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 120)
    return [r if r is not None else {"src": s.src, "dst": s.dst, "bytes": s.nbytes, "ok": False,
                                     "error": "flow thread did not finish", "timeline": []}
            for r, s in zip(results, specs, strict=True)]
