"""topologies.calibration.rate_from: the rule that turns a measured rate into the chosen one."""

import pytest

from topologies.calibration import HEADROOM, MIN_RATE, CalibrationError, rate_from


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
