"""The live stage every code exercise ends with: a short verified transfer on a small Mininet
fabric built from the grading copy, so it runs the student's P4 program (BMv2 compiles the
copy's p4src/), controller and agents."""

from __future__ import annotations

import os
from typing import Any

from grader.report import Check, not_run

LIVE_FABRIC = {"planes": 2, "t0_per_plane": 2, "t1_per_plane": 2, "hosts_per_t0": 1}
LIVE_BYTES = 256 * 1024  # about a quarter of a second at the live fabric's port rate
LIVE_RATE_PPS = 500
# Set (to anything but "" or "0") to stop before the live stage: the fast tests of the unit and
# simulator stages use it, so the default test suite needs neither root nor Mininet.
SKIP_ENV = "MRC_GRADE_SKIP_LIVE"


def skipped() -> bool:
    return os.environ.get(SKIP_ENV, "") not in ("", "0")


def transfer_check(ctx: Any, check_id: str, points: int, *, hint: str,
                   nbytes: int = LIVE_BYTES) -> Check:
    """One MRC write across the spines, verified byte for byte by the receiver."""
    title = f"a {nbytes // 1024} KiB write crosses a {LIVE_FABRIC['planes']}-plane Mininet " \
            f"fabric on {ctx.target} and arrives intact"
    if skipped():
        return not_run(check_id, title, points, f"{SKIP_ENV} is set: the live stage is skipped")
    if not ctx.is_root:
        return not_run(check_id, title, points, "Mininet needs root: sudo ./testbed grade")
    from fabric.topology import Fabric  # the grading copy's modules, imported late on purpose
    from topologies.network import MrcNetwork, NetworkConfig, NetworkError

    fabric = Fabric(**LIVE_FABRIC)
    net = MrcNetwork(NetworkConfig(fabric=fabric, target=ctx.target,
                                   port_rate_pps=LIVE_RATE_PPS), log=lambda *_: None)
    try:
        net.start()
        result = net.transfer(0, fabric.hosts - 1, nbytes, timeout=60.0)
    except (NetworkError, OSError, RuntimeError) as exc:
        return Check(check_id, title, points, False, expected="the fabric starts and the "
                     "write completes", observed=f"{type(exc).__name__}: {exc}", hint=hint)
    finally:
        net.stop()
    ok = bool(result.get("ok") and result.get("verified"))
    observed = "completed and verified" if ok else \
        f"ok={result.get('ok')} verified={result.get('verified')} error={result.get('error')}"
    return Check(check_id, title, points, ok, expected="completed and verified",
                 observed=observed, hint=hint)
