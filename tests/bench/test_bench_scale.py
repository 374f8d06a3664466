"""bench.costs.scale's arithmetic from synthetic points: growth per switch, path and host as
least-squares slopes, and the table it writes."""

from __future__ import annotations

import pytest

pytest.importorskip("mininet.net", reason="bench.costs.scale imports the Mininet fabric")

from bench.costs.scale import curve_markdown, growth, slope  # noqa: E402


def _point(target: str, switches: int, hosts: int, paths: int, up: float, rss: float) -> dict:
    return {"target": target, "sizes": [1, 1, 1, 1], "switches": switches, "hosts": hosts,
            "paths": paths, "bring_up_s": {"total_s": up, "mininet_s": up / 2,
                                           "program_s": up / 4, "agents_s": up / 4},
            "stop_s": 1.0, "switch_rss_mb": rss, "idle_cpu_cores": 0.0,
            "chosen_rate_pps": 100, "faithful_sustained_pps": 250.0 + switches}


def test_slopes_are_the_cost_of_one_more_switch_path_and_host() -> None:
    points = [_point("soft", s, 4, s // 2, 2 + 0.1 * s, 100 + 0.5 * s) for s in (16, 40, 144)]
    points += [_point("soft", 24, h, 12, 4.4 + 0.25 * (h - 4), 112) for h in (4, 8, 16)]
    points += [_point("bmv2", s, 4, s // 2, 1 + 0.2 * s, 50 * s) for s in (16, 144)]
    g = growth(points)
    assert g["soft"]["bring_up_s_per_switch"] == pytest.approx(0.1)
    assert g["soft"]["bring_up_s_per_path"] == pytest.approx(0.2)
    assert g["soft"]["bring_up_s_per_host"] == pytest.approx(0.25)
    assert g["soft"]["rss_mb_per_switch"] == pytest.approx(0.5)
    assert g["bmv2"]["rss_mb_per_switch"] == pytest.approx(50)
    assert g["bmv2"]["bring_up_s_per_host"] is None  # no host series measured
    assert slope([{"x": 1, "y": 2}], "x", "y") is None
    table = curve_markdown(points, g)
    assert "| soft | 0.1 | 0.5 | 0.2 | 0.25 |" in table and "| bmv2 |" in table
    assert table.count("\n| soft | 1x1x1x1 |") == 6
