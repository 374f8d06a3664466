"""The command users are given, `python topologies/two_tier.py --no-cli --json`, on each switch
target with the default fabric and the rate it calibrates (--rate auto): the demo transfer completes
verified while a link fails and recovers, every plane carries data, the failed route is
bypassed, no EV is retired on a route that does not cross the failed link (the report's
check), the retired EVs come back, and nothing is left behind. Its --report page, opened from
the file in headless Chromium, shows the failed link down within 1 s of the failure with
the route's EVs retired, and at the end the link up and the EVs back. Figures (goodput, bypass time,
CPU pressure) are printed by the demo, not asserted: timing on a shared 2-core machine is
noisy."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulation.calibration import MIN_RATE
from tests.browser import chromium, dump_dom, embedded_runs
from tests.e2e.support import DEMO_TIMEOUT_S, run_demo_json, skip_reason, snapshot
from tests.support import require_bmv2

pytestmark = [pytest.mark.root, pytest.mark.timeout(DEMO_TIMEOUT_S + 120),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_demo_runs_on_target(target: str, tmp_path: Path) -> None:
    if target == "bmv2":
        require_bmv2()
    before = snapshot()
    page = tmp_path / "demo.html"
    report = run_demo_json(target, "--report", str(page))
    print(f"{target}: goodput {report['transfer']['goodput_of_capacity']:.0%} of capacity, "
          f"counters {report['counters']}, consumed {report['switch_frames_consumed']}, "
          f"checks {report['checks']}, CPU pressure {report['cpu_pressure']}")
    assert report["fabric"]["target"] == target
    choice = report["rate_choice"]  # the default, --rate auto: measured, then explained
    assert report["fabric"]["port_rate_pps"] == choice["rate_pps"] >= MIN_RATE
    assert choice["sustained_pps"] > choice["rate_pps"] and "busiest port" in choice["why"]
    assert report["fidelity"]["verdict"] in ("faithful", "emulation-bound")
    assert report["checks"]["judged"] == (not report["emulation_bound"])
    transfer = report["transfer"]
    assert transfer["ok"] and transfer["verified"], transfer
    assert all(n > 0 for n in report["per_plane_tx_packets"].values())
    failure = report["failure"]
    assert failure["routes_through_link"] >= 1
    assert failure["bypass_s"] is not None, failure.get("bypass_note")
    assert failure["retired"]["failed_route_after_failure"] >= 1
    assert failure["reinstated_after_up"], "probes did not reinstate the retired EVs"
    assert report["counters"]["ev_retired"] >= 1
    after = snapshot()
    assert not after.leaks_since(before), after.leaks_since(before)
    assert report["checks"]["no_healthy_route_retirements"], (
        failure["retired"], f"CPU pressure {report['cpu_pressure']}")
    _check_report_page(page, failure)


def _check_report_page(page: Path, failure: dict) -> None:
    """The report as a person sees it: Chromium renders the moment the link was down and the
    end of the run (module docstring)."""
    if chromium() is None:
        pytest.skip("chromium is not installed (apt install chromium; CI installs it)")
    (recording,) = embedded_runs(page)
    samples = recording["samples"]
    down_at = next(e["t"] for e in recording["events"] if e["event"] == "down")
    shown = next(i for i, s in enumerate(samples) if s.get("down"))
    assert samples[shown]["t"] - down_at <= 1.0, (down_at, samples[shown]["t"])
    retired = next(i for i, s in enumerate(samples[shown:], start=shown)
                   if any(info[0] == "ASSUMED_BAD" for info in s.get("evs", {}).values()))
    dom = dump_dom(page, f"sample={shown}")
    assert dom.count('class="link link-down"') == 1 and '<polyline points="' in dom
    assert dump_dom(page, f"sample={retired}").count('class="ev ev-ASSUMED_BAD"') >= 1
    end = dump_dom(page, f"sample={len(samples) - 1}")  # (the style names every class too)
    assert 'class="link link-down"' not in end
    if failure["reinstated_after_up"]:
        assert 'class="ev ev-ASSUMED_BAD"' not in end and 'class="ev ev-GOOD"' in end
    print(f"report {page.stat().st_size} bytes, {len(samples)} samples; link down shown "
          f"{samples[shown]['t'] - down_at:.2f} s after the failure")
