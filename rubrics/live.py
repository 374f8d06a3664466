"""The live stage every code exercise ends with: a short verified transfer on a small Mininet
fabric. In the sandbox it is built from the grading copy, so it runs the student's P4 program
(BMv2 compiles the copy's p4src/) and controller (observe_transfer). Where the student's
answer is data, the grader runs it itself, from the instructor's project with the reported
tables installed (measure_transfer); where it is an endpoint's code, the grader runs the
fabric and the agents and serves each agent's core from the sandbox
(measure_served_transfer). The submission's process never sees either run."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

from grader import livelogs
from grader.report import Check, not_run

LIVE_FABRIC = {"planes": 2, "t0_per_plane": 2, "t1_per_plane": 2, "hosts_per_t0": 1}
LIVE_BYTES = 256 * 1024  # about a quarter of a second at the live fabric's port rate
LIVE_RATE_PPS = 500
TRANSFER_TIMEOUT_S = 60.0  # the write normally takes about a second
# Set (to anything but "" or "0") to stop before the live stage: the fast tests of the unit and
# simulator stages use it, so the default test suite needs neither root nor Mininet.
SKIP_ENV = "MRC_GRADE_SKIP_LIVE"


def skipped() -> bool:
    return os.environ.get(SKIP_ENV, "") not in ("", "0")


def _title(target: str, nbytes: int) -> str:
    return (f"a {nbytes // 1024} KiB write crosses a {LIVE_FABRIC['planes']}-plane Mininet "
            f"fabric on {target} and arrives intact")


def _not_here(is_root: bool) -> str:
    """Why the live stage cannot run in this process ('' when it can)."""
    if skipped():
        return f"{SKIP_ENV} is set: the live stage is skipped"
    return "" if is_root else "Mininet needs root: sudo ./testbed grade"


def observe_transfer(ctx: Any, nbytes: int = LIVE_BYTES) -> dict[str, Any]:
    """In the sandbox: one MRC write across the spines, as the receiver reported it.
    {"skipped": why} when it cannot run here, else {"ok", "verified", "error"}."""
    why = _not_here(ctx.is_root)
    return {"skipped": why} if why else run_transfer(ctx.target, nbytes=nbytes)


def measure_transfer(target: str, tables: dict[str, Any],
                     nbytes: int = LIVE_BYTES) -> dict[str, Any]:
    """In the grader's own process: the same write on a fabric whose controller installs
    `tables` (switch name -> controller.tables.SwitchTables, from a report) instead of the
    ones it derives; observe_transfer's answer."""
    why = _not_here(os.geteuid() == 0)
    return {"skipped": why} if why else run_transfer(target, tables, nbytes)


def measure_served_transfer(ctx: Any, nbytes: int = LIVE_BYTES) -> dict[str, Any]:
    """In the grader's own process: the same write on the instructor's fabric and agents,
    each agent's core served from the sandbox on the grading copy (the student's endpoint,
    rubrics.remote_core.served_cores); observe_transfer's answer. The agents' I/O, the frames
    and the receiver's memory (its shadow of what its NICs received) are the grader's."""
    from fabric.topology import Fabric
    from rubrics.remote_core import served_cores

    why = _not_here(os.geteuid() == 0)
    if why:
        return {"skipped": why}
    if ctx.copy is None:
        return {"ok": False, "verified": False, "started": False,
                "error": "the grader has no grading copy to serve your endpoints from"}
    hosts = list(range(Fabric(**LIVE_FABRIC).hosts))
    with served_cores(ctx.copy, hosts, contained=ctx.contained) as paths:
        return run_transfer(ctx.target, nbytes=nbytes,
                            served=tuple((h, str(path)) for h, path in paths.items()))


def run_transfer(target: str, tables: dict[str, Any] | None = None,
                 nbytes: int = LIVE_BYTES,
                 served: tuple[tuple[int, str], ...] = (),
                 timeout_s: float = TRANSFER_TIMEOUT_S) -> dict[str, Any]:
    from emulation.network import MrcNetwork, NetworkConfig, NetworkError
    from fabric.topology import Fabric  # the grading copy's modules, imported late on purpose

    fabric = Fabric(**LIVE_FABRIC)
    said: deque[str] = deque(maxlen=200)  # the network's and controller's messages
    # Our own folder (mkdtemp: 0700), not the network's: a network that fails to start
    # removes its own at once, and its logs are what the student needs then.
    workdir = Path(tempfile.mkdtemp(prefix="mrc-live-"))
    net = MrcNetwork(NetworkConfig(fabric=fabric, target=target, port_rate_pps=LIVE_RATE_PPS,
                                   served_cores=served), workdir=workdir,
                     log=lambda *a: said.append(" ".join(str(x) for x in a)))
    net.static_tables.update(tables or {})
    out: dict[str, Any] = {"started": False}
    try:
        try:
            net.start()
            out["started"] = True
            result = net.transfer(0, fabric.hosts - 1, nbytes, timeout=timeout_s)
            out.update(ok=result.get("ok") is True, verified=result.get("verified") is True,
                       error=str(result.get("error") or ""))
        except (NetworkError, OSError, RuntimeError) as exc:
            out.update(ok=False, verified=False, error=f"{type(exc).__name__}: {exc}")
        finally:
            try:
                if not (out.get("ok") and out.get("verified")):
                    out["logs"] = livelogs.collect(workdir, list(said), net)
            finally:
                net.stop()
    finally:
        shutil.rmtree(workdir)
    return out


def judge_transfer(obs: Any, target: str, check_id: str, points: int, *, hint: str,
                   nbytes: int = LIVE_BYTES) -> Check:
    """Outside the sandbox: the verdict on observe_transfer's report."""
    title = _title(target, nbytes)
    if not isinstance(obs, dict):
        return Check(check_id, title, points, False, observed="not reported by the sandbox")
    if "skipped" in obs:
        return not_run(check_id, title, points, str(obs["skipped"]))
    if obs.get("started") is False:
        return Check(check_id, title, points, False, expected="the fabric starts and the "
                     "write completes", observed=str(obs.get("error", "")), hint=hint,
                     logs=_logs(obs))
    ok = obs.get("ok") is True and obs.get("verified") is True
    observed = "completed and verified" if ok else \
        f"ok={obs.get('ok')} verified={obs.get('verified')} error={obs.get('error')}"
    return Check(check_id, title, points, ok, expected="completed and verified",
                 observed=observed, hint=hint, logs=_logs(obs))


def _logs(obs: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(livelogs.bounded(obs.get("logs")).items())
