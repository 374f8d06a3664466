"""Kernel TCP / MPTCP flows between Mininet hosts (bench.contenders.kernel_flows inside each
namespace).

One server per destination host binds every NIC address of that host. TCP uses the whole
NIC as a RoCE application with one QP per plane would: each flow is one connection per plane
(client bound to its plane-p address, towards the peer's plane-p address, 1/P of the bytes),
hash-pinned by the baseline ECMP inside its plane; the flow's timeline is their sum. An MPTCP
connection starts on plane 0 and adds one subflow per other plane. Every process is started
with host.popen and ended by its own PID if it outlives its timeout.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.contenders.kernel_flows import mptcp_host_commands
from bench.contenders.mrc_flows import FlowSpec
from bench.errors import BenchmarkError

REPO = Path(__file__).resolve().parents[2]
_ports = itertools.count(5201)
STARTUP_S = 20.0


class KernelRunError(BenchmarkError, RuntimeError):
    """A server did not come up or a host command failed."""


MPTCP_PLANE = 0  # where an MPTCP connection starts (its subflows join on the others)


def configure_mptcp(net, hosts_as_server: set[int], hosts: set[int]) -> None:
    """`ip mptcp` endpoints and limits in each involved host namespace."""
    fabric = net.fabric
    for h in sorted(hosts):
        nics = [(fabric.nic(h, p).ifname, str(fabric.nic(h, p).address))
                for p in range(fabric.planes)]
        for cmd in mptcp_host_commands(nics, server=h in hosts_as_server):
            out = net.host(h).cmd(" ".join(cmd) + " && echo OK").strip()
            if not out.endswith("OK"):
                raise KernelRunError(f"h{h}: `{' '.join(cmd)}` failed: {out}")


def _popen(net, host: int, args: list[str]) -> subprocess.Popen:
    return net.host(host).popen([sys.executable, "-m", "bench.contenders.kernel_flows", *args],
                                cwd=str(REPO), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO)})


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def run_kernel_flows(net, specs: list[FlowSpec], proto: str, *, timeout: float,
                     on_start=None) -> list[dict[str, Any]]:
    """Run the flows concurrently; results in the order of `specs` (same keys as MRC flows).

    `on_start(start_time)` is called once every client has connected (or given up), for
    failure injection.
    """
    fabric = net.fabric
    if proto == "mptcp":
        configure_mptcp(net, {s.dst for s in specs}, {x for s in specs for x in (s.src, s.dst)})
    port = next(_ports)
    servers: dict[int, subprocess.Popen] = {}
    clients: list[subprocess.Popen] = []
    try:
        for dst in sorted({s.dst for s in specs}):
            count = sum(len(_parts(s, proto, fabric.planes)) for s in specs if s.dst == dst)
            binds = [a for p in range(fabric.planes)
                     for a in ("--bind", str(fabric.nic(dst, p).address))]
            servers[dst] = _popen(net, dst, ["server", *binds, "--port", str(port), "--proto",
                                             proto, "--count", str(count), "--timeout",
                                             str(timeout + STARTUP_S)])
        for dst, proc in servers.items():
            line = proc.stdout.readline().strip() if proc.stdout else ""
            if line != "READY":
                err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
                raise KernelRunError(f"h{dst}: {proto} server did not start: {line!r} {err}")
        start = time.monotonic()
        owner = []  # (index into specs, bytes) of each client
        for i, s in enumerate(specs):
            for plane, nbytes in _parts(s, proto, fabric.planes):
                owner.append((i, nbytes))
                clients.append(_popen(net, s.src, [
                    "client", "--src", str(fabric.nic(s.src, plane).address),
                    "--dst", str(fabric.nic(s.dst, plane).address), "--port", str(port),
                    "--proto", proto, "--bytes", str(nbytes), "--timeout", str(timeout)]))
        first_lines = []
        for proc in clients:  # failures are timed from the moment every flow can send
            first_lines.append(proc.stdout.readline() if proc.stdout is not None else "")
        if on_start is not None:
            on_start(start)
        client_reports = []
        for proc, first in zip(clients, first_lines, strict=True):
            # not communicate(): it reads the pipe beneath the text buffer, where readline()
            # may already hold the report of a client that finished quickly
            try:
                proc.wait(timeout=timeout + STARTUP_S)
                out = proc.stdout.read() if proc.stdout is not None else ""
                err = proc.stderr.read() if proc.stderr is not None else ""
            except subprocess.TimeoutExpired:
                _end(proc)
                out, err = "", "client outlived its timeout"
            client_reports.append(_parse(first + out, err))
        server_reports: dict[int, list[dict[str, Any]]] = {}
        for dst, proc in servers.items():
            try:
                out, _ = proc.communicate(timeout=timeout + STARTUP_S)
            except subprocess.TimeoutExpired:
                _end(proc)
                out = ""
            server_reports[dst] = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    finally:
        for proc in [*clients, *servers.values()]:
            _end(proc)
    subs: list[list[dict[str, Any]]] = [[] for _ in specs]
    for (i, nbytes), report in zip(owner, client_reports, strict=True):
        part = FlowSpec(specs[i].src, specs[i].dst, nbytes)
        subs[i].append(_result(part, report, server_reports.get(part.dst, [])))
    return [_merge(s, parts) for s, parts in zip(specs, subs, strict=True)]


def _parts(spec: FlowSpec, proto: str, planes: int) -> list[tuple[int, int]]:
    """(plane, bytes) of each connection of a flow: TCP one per plane, MPTCP one."""
    if proto != "tcp":
        return [(MPTCP_PLANE, spec.nbytes)]
    share = -(-spec.nbytes // planes)
    return [(p, min(share, spec.nbytes - p * share)) for p in range(planes)
            if spec.nbytes > p * share]


def _merge(spec: FlowSpec, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One flow from its connections: delivered bytes summed over one timeline."""
    if len(parts) == 1:
        return {**parts[0], "bytes": spec.nbytes}
    ok = all(p["ok"] for p in parts)
    errors = [p["error"] for p in parts if p.get("error")]
    out: dict[str, Any] = {"src": spec.src, "dst": spec.dst, "bytes": spec.nbytes,
                           "connections": len(parts), "ok": ok,
                           "error": "; ".join(errors[:2]) or None, "timeline": []}
    started = [p for p in parts if "start" in p]
    if not started:
        return out
    start, end = min(p["start"] for p in started), max(p["end"] for p in started)
    steps = sorted((p["start"] + t, b - prev) for p in started
                   for (t, b), prev in zip(p["timeline"], [0, *(b for _, b in p["timeline"])],
                                           strict=False))
    timeline, got = [], 0
    for t, added in steps:
        got += added
        timeline.append((t - start, got))
    duration = end - start
    out.update(mss=min((p["mss"] for p in started if p.get("mss")), default=None),
               start=start, end=end, duration_s=duration, delivered=got, timeline=timeline,
               goodput_bps=got * 8 / duration if duration > 0 else 0.0,
               completion_s=timeline[-1][0] if ok and timeline else None)
    return out


def _parse(out: str, err: str) -> dict[str, Any]:
    for line in out.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {"ok": False, "error": (err or "no report").strip()[-300:]}


def _result(spec: FlowSpec, client: dict[str, Any], server: list[dict[str, Any]]
            ) -> dict[str, Any]:
    """Match the client's report with the server connection from its address."""
    result: dict[str, Any] = {"src": spec.src, "dst": spec.dst, "bytes": spec.nbytes,
                              "ok": False, "error": client.get("error"),
                              "timeline": []}
    conn = next((c for c in server if c["peer"] == client.get("src")), None)
    if conn is None or "start" not in client:
        result["error"] = result["error"] or "the server saw no connection from the client"
        return result
    start = client["start"]
    timeline = [(t - start, b) for t, b in conn["samples"]]
    got = conn["bytes"]
    end = client["end"]
    complete = bool(client.get("ok")) and conn["complete"] and got >= spec.nbytes
    duration = end - start
    result.update(ok=complete, mss=client.get("mss"), start=start, end=end,
                  duration_s=duration, delivered=got,
                  timeline=timeline, goodput_bps=got * 8 / duration if duration > 0 else 0.0,
                  completion_s=timeline[-1][0] if complete and timeline else None)
    if not complete and not result["error"]:
        result["error"] = f"server received {got} of {spec.nbytes} bytes"
    return result
