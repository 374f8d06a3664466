"""A fabric the machine's memory cannot hold is refused before anything starts, with what it
needs, what the machine has and the largest fabric of that shape that fits."""

from __future__ import annotations

import pytest

from emulation.capacity import CapacityError, available_mb, check, needed_mb
from fabric.options import PRESETS
from fabric.topology import Fabric


def test_shared_soft_processes_cost_far_less_than_bmv2_processes() -> None:
    f = Fabric(*PRESETS["paths-128"])
    soft, bmv2 = needed_mb(f, "soft", 2), needed_mb(f, "bmv2", 2)
    assert soft < 1500 < 7000 < bmv2  # the budget; 144 BMv2 processes took 7.4 GB
    assert needed_mb(f, "soft", 2) < needed_mb(f, "soft", 144)


def test_a_fabric_that_does_not_fit_is_refused_with_what_would() -> None:
    f = Fabric(*PRESETS["paths-256"])
    check(f, "soft", 2, free_mb=24_000)
    check(f, "bmv2", 2, free_mb=24_000)
    with pytest.raises(CapacityError) as err:
        check(f, "bmv2", 2, free_mb=8_000)
    text = str(err.value)
    assert "272-switch fabric on bmv2 needs about" in text and "7.8 GB available" in text
    assert "8x2x" in text and "fits" in text and "--target soft" in text
    fits = int(text.split("8x2x")[1].split("x")[0])
    assert 1 <= fits < 32
    check(Fabric(8, 2, fits, 2), "bmv2", 2, free_mb=8_000)  # the advice is true
    with pytest.raises(CapacityError, match="no fabric of this shape fits"):
        check(f, "soft", 2, free_mb=100)


def test_this_machine_reports_its_available_memory(tmp_path) -> None:
    assert available_mb() > 0
    bad = tmp_path / "meminfo"
    bad.write_text("MemTotal: 1 kB\n")
    with pytest.raises(CapacityError, match="no MemAvailable"):
        available_mb(bad)
