"""A mid-size fabric end to end on both targets, as CI can afford: `two_tier.py --fabric
paths-32` (4 planes x 2 T0 x 8 T1, 40 switches, 32 paths per host pair) with its calibrated
rate. The transfer is sprayed over all 32 paths and verified while a link fails, the failed
route is bypassed and its EVs come back, retired and reinstated counts per route add up, the
switches share few processes (software switch), and nothing is left behind. The full sizes
(paths-128, paths-256, hosts-16) are a recorded run in docs/benchmarks.md, "Cost of scale"."""

from __future__ import annotations

import pytest

from tests.e2e.support import DEMO_TIMEOUT_S, run_demo_json, skip_reason, snapshot
from tests.support import require_bmv2

PATHS = 32

pytestmark = [pytest.mark.root, pytest.mark.timeout(DEMO_TIMEOUT_S + 120),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_paths_32_demo(target: str) -> None:
    if target == "bmv2":
        require_bmv2()
    before = snapshot()
    report = run_demo_json(target, "--fabric", "paths-32")
    f = report["fabric"]
    print(f"{target}: bring-up {report['bring_up_s']}, rate {f['port_rate_pps']}, goodput "
          f"{report['transfer']['goodput_of_capacity']:.0%}, fidelity "
          f"{report['fidelity']['verdict']}, checks {report.get('checks')}")
    assert (f["planes"], f["t1"]) == (4, 8)
    assert report["rate_choice"]["rate_pps"] == f["port_rate_pps"]
    assert report["transfer"]["ok"] and report["transfer"]["verified"]
    used = [p for p in report["per_path"] if p["data_packets"] > 0]
    assert len(report["per_path"]) == len(used) == PATHS, report["per_path"]
    failure = report["failure"]
    retired = failure["retired"]
    assert failure["bypass_s"] is not None, failure.get("bypass_note")
    assert 1 <= retired["failed_route_after_failure"] <= retired["failed_route_evs"]
    assert failure["reinstated_after_up"]
    counters = report["counters"]
    assert counters["ev_reinstated"] <= counters["ev_retired"]
    assert report["checks"]["judged"] == (not report["emulation_bound"])
    after = snapshot()
    assert not after.leaks_since(before), after.leaks_since(before)
