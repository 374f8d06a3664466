"""Kernel TCP / MPTCP flows between Mininet hosts (bench.kernel_flows inside each namespace).

One server per destination host binds every NIC address of that host; each flow's client
binds its own NIC address on plane 0, the plane the single-path agent mode uses
(host_agent.agent.single_path_config), so both single-path contenders see the same fabric; an
MPTCP connection starts there and adds one subflow per other plane. Every
process is started with host.popen and ended by its own PID if it outlives its timeout.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.kernel_flows import mptcp_host_commands
from bench.mrc_flows import FlowSpec

REPO = Path(__file__).resolve().parent.parent
_ports = itertools.count(5201)
STARTUP_S = 20.0


class KernelRunError(RuntimeError):
    """A server did not come up or a host command failed."""


SINGLE_PLANE = 0


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
    return net.host(host).popen([sys.executable, "-m", "bench.kernel_flows", *args],
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
            count = sum(1 for s in specs if s.dst == dst)
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
        for s in specs:
            plane = SINGLE_PLANE
            clients.append(_popen(net, s.src, [
                "client", "--src", str(fabric.nic(s.src, plane).address),
                "--dst", str(fabric.nic(s.dst, plane).address), "--port", str(port),
                "--proto", proto, "--bytes", str(s.nbytes), "--timeout", str(timeout)]))
        first_lines = []
        for proc in clients:  # failures are timed from the moment every flow can send
            first_lines.append(proc.stdout.readline() if proc.stdout is not None else "")
        if on_start is not None:
            on_start(start)
        client_reports = []
        for proc, first in zip(clients, first_lines, strict=True):
            try:
                out, err = proc.communicate(timeout=timeout + STARTUP_S)
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
    return [_result(s, c, server_reports.get(s.dst, []))
            for s, c in zip(specs, client_reports, strict=True)]


def _parse(out: str, err: str) -> dict[str, Any]:
    for line in out.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {"ok": False, "error": (err or "no report").strip()[-300:]}


def _result(spec: FlowSpec, client: dict[str, Any], server: list[dict[str, Any]]
            ) -> dict[str, Any]:
    """Match the client's report with the server connection from its address."""
    result: dict[str, Any] = {"src": spec.src, "dst": spec.dst, "bytes": spec.nbytes,
                              "plane": SINGLE_PLANE, "ok": False, "error": client.get("error"),
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
