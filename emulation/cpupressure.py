"""How long tasks waited for a CPU while something ran: Linux pressure stall information.

Every switch and agent of an emulated fabric shares the machine's CPUs. When they are
oversubscribed, packets wait in run queues rather than in the emulated links, and delay spikes
the network would not have look like congestion or a dead path to the agents. PSI's "some" line
counts the time at least one runnable task waited for a CPU, so its share of a run says whether
the emulation kept up (docs/benchmarks.md, "BMv2 jitter").
"""

from __future__ import annotations

import time
from pathlib import Path

PSI_CPU = Path("/proc/pressure/cpu")
# Share of the demo's transfer with some task waiting for a CPU: BMv2 at 500 packets/s, whose
# fabric stalled for up to 480 ms and lost EVs off healthy routes, 83-91%; BMv2 at 250, 35-49%;
# the software switch at 500, 17-45% (docs/benchmarks.md, "BMv2 jitter").
EMULATION_BOUND_SHARE = 0.65


def _some_total_us(path: Path) -> int | None:
    try:
        first = path.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "some":
        return None
    fields = dict(f.split("=", 1) for f in first[1:] if "=" in f)
    try:
        return int(fields["total"])
    except (KeyError, ValueError):
        return None


class CpuPressure:
    """`start()` then `share()`: the fraction of the elapsed time some task waited for a CPU,
    or None where the kernel has no PSI."""

    def __init__(self, path: Path = PSI_CPU) -> None:
        self.path = path
        self._t0: float | None = None
        self._us0: int | None = None

    def start(self) -> CpuPressure:
        self._us0, self._t0 = _some_total_us(self.path), time.monotonic()
        return self

    def share(self) -> float | None:
        us1 = _some_total_us(self.path)
        if self._us0 is None or us1 is None or self._t0 is None:
            return None
        elapsed = time.monotonic() - self._t0
        return min(1.0, (us1 - self._us0) / 1e6 / elapsed) if elapsed > 0 else None
