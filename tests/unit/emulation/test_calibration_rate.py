"""emulation.calibration.rate_from: the rule that turns a measured rate into the chosen one."""

import pytest

from emulation.calibration import HEADROOM, MIN_RATE, CalibrationError, rate_from


def test_fast_ports_round_down_to_tens():
    assert rate_from(1897, "x") == 750  # 0.4 * 1897 = 758.8
    assert rate_from(250, "x") == 100


def test_slow_ports_keep_whole_packets():
    # hosts-16 with every host sending: 37 frames/s sustained
    assert rate_from(37, "x") == 14
    assert rate_from(249, "x") == 99


def test_below_the_floor_is_refused_with_the_measurement():
    sustained = (MIN_RATE - 1) / HEADROOM
    with pytest.raises(CalibrationError, match=f"sustained only {sustained:.0f} frames/s"):
        rate_from(sustained, "every host")
    assert rate_from(MIN_RATE / HEADROOM, "x") == MIN_RATE


def test_the_bench_ladder_descends_to_the_floor():
    from bench.calibrate import ladder
    assert ladder(44) == [44, 30, 21, 14, MIN_RATE]
    assert ladder(MIN_RATE) == [MIN_RATE]
    assert ladder(3) == [MIN_RATE]  # a run that moved almost nothing still tries the floor
    steps = ladder(750)
    assert steps == sorted(set(steps), reverse=True) and steps[-1] == MIN_RATE


def test_a_collapsed_unlimited_run_falls_back_to_the_highest_faithful_rung(monkeypatch):
    import bench.calibrate as cal
    from fabric.topology import Fabric
    runs = []

    def fake_run(config, log, timeout):
        rate = config.port_rate_pps
        runs.append(rate)
        if rate is None:  # unlimited: no write completes, the busiest port moved 20 frames/s
            return [{"ok": False, "error": "not complete"}], {"bottleneck_pps": 20.0,
                                                               "verdict": "emulation-bound"}
        faithful = rate <= 28
        return ([{"ok": rate <= 30}], {"verdict": "faithful" if faithful else "emulation-bound",
                                      "bottleneck_pps": float(rate), "why": "x"})

    monkeypatch.setattr(cal, "_run", fake_run)
    out = cal.calibrate("soft", Fabric(8, 8, 8, 2), lambda m: None)
    assert runs == [None, 40, 28]  # 2 x 20 moved, then 0.7 of it
    assert out["rate_pps"] == 28
    assert [r["rate_pps"] for r in out["ladder"]] == [40, 28]
    assert "28 was the highest" in out["why"]


def test_no_faithful_rung_is_refused_with_every_rung_tried(monkeypatch):
    import bench.calibrate as cal
    from fabric.topology import Fabric

    def fake_run(config, log, timeout):
        return [{"ok": False}], {"bottleneck_pps": 5.0, "verdict": "emulation-bound"}

    monkeypatch.setattr(cal, "_run", fake_run)
    with pytest.raises(CalibrationError, match="none of the rates tried"):
        cal.calibrate("soft", Fabric(8, 8, 8, 2), lambda m: None)
