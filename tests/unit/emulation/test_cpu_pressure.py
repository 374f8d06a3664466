"""emulation.cpupressure: the share of a run some task waited for a CPU, from a PSI file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from emulation.cpupressure import CpuPressure


def _psi(path: Path, some_total_us: int) -> None:
    path.write_text(f"some avg10=1.00 avg60=2.00 avg300=3.00 total={some_total_us}\n"
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_share_is_the_waiting_time_over_the_elapsed_time(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    _psi(psi, 1_000_000)
    p = CpuPressure(psi).start()
    time.sleep(0.2)
    _psi(psi, 1_000_000 + 50_000)  # 50 ms of waiting
    share = p.share()
    elapsed_max = time.monotonic() - p._t0  # type: ignore[operator]
    assert share is not None
    assert 0.05 / elapsed_max <= share <= 0.05 / 0.2


def test_share_is_capped_at_the_whole_run(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    _psi(psi, 0)
    p = CpuPressure(psi).start()
    _psi(psi, 10**12)
    assert p.share() == 1.0


@pytest.mark.parametrize("text", ["", "full avg10=0 total=5\n", "some avg10=0.00 total=x\n"])
def test_no_or_unreadable_psi_gives_none(tmp_path: Path, text: str) -> None:
    psi = tmp_path / "cpu"
    psi.write_text(text)
    assert CpuPressure(psi).start().share() is None
    assert CpuPressure(tmp_path / "missing").start().share() is None
