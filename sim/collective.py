"""Ring all-reduce on the simulated fabric, repeated like a synchronous training job, as the
bench runs it (bench/allreduce.py): each step is 2(N-1) phases; in each phase every host
writes buffer/N bytes to its ring successor at once, and the phase ends when every write is
complete at both ends. Step time is the sum of its phase times; every phase's data is checked
byte for byte at its receiver. The reduction arithmetic is not modelled.

Scenarios: `allreduce` (nothing fails), `allreduce-flap` (links flap across the fabric:
failures.FabricFlapper at FLAPS_PER_STEP flaps per ideal step time, each FLAP_DOWN_RTTS long)
and `allreduce-reboot` (spine 0 of plane 0 reboots as step REBOOT_STEP starts; it is away
failures.REBOOT_RTTS). Results add the step times and, for the reboot, each step's time over
the first (clean) step's. Failures here do not re-evaluate the capacity (a max-flow per flap
would cost more than the run at 1,024 hosts); goodput_ratio is against the healthy fabric.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from sim.failures import REBOOT_RTTS, FabricFlapper
from sim.harness import Harness, Transfer
from sim.scenario_kit import Finisher

STEPS = 3
FLAPS_PER_STEP = 1.0
FLAP_DOWN_RTTS = 20.0
REBOOT_STEP = 1


class RingAllreduce:
    """Drives the phases: posts the next one when the last write of the current one is done."""

    def __init__(self, h: Harness, buffer_bytes: int, steps: int = STEPS) -> None:
        n = h.fabric.hosts
        if n < 3:
            raise ValueError("a ring all-reduce needs at least 3 hosts (each host keeps one "
                             "QP per peer, and with 2 they would write to each other)")
        self.h, self.steps = h, steps
        self.chunk = -(-buffer_bytes // n)
        self.phases = 2 * (n - 1)
        self.ring: list[Transfer] = [h.add_transfer(i, (i + 1) % n, self.chunk)
                                     for i in range(n)]
        h.planned_bytes = steps * self.phases * n * self.chunk
        h.on_idle = self._phase_done
        self.phase_times: list[float] = []
        self.step_times: list[float] = []
        self.mismatches = 0
        self.step_started: list[Callable[[int], None]] = []  # hooks, given each step as it starts
        self._began: float | None = None

    def _phase_done(self) -> None:
        h = self.h
        now = h.loop.now
        self.mismatches += sum(1 for t in self.ring if t.failed or bytes(t.buffer) != t.data)
        began = h.start_time if self._began is None else self._began
        self.phase_times.append(now - began)
        done = len(self.phase_times)
        if done % self.phases == 0:
            self.step_times.append(sum(self.phase_times[-self.phases:]))
        if done == self.steps * self.phases:
            return  # nothing pending: the run ends here
        if done % self.phases == 0:
            for hook in self.step_started:
                hook(done // self.phases)
        self._began = now
        for t in self.ring:
            h.repost(t, h.rng.randbytes(self.chunk))

    def ideal_step_s(self) -> float:
        """A step at line rate: every host sends 2(N-1) chunks through its NICs."""
        h = self.h
        return self.phases * self.chunk * 8 / (h.fabric.planes * h.settings.rate_bps)

    def figures(self) -> dict[str, Any]:
        times = self.step_times
        return {
            "buffer_bytes": self.chunk * len(self.ring), "steps": self.steps,
            "phases_per_step": self.phases, "step_times_s": times,
            "step_time_s": ({"mean": statistics.fmean(times), "max": max(times),
                             "min": min(times)} if times else None),
            "ideal_step_s": self.ideal_step_s(), "phase_mismatches": self.mismatches,
            "bytes": self.chunk * len(self.ring) * self.phases * len(times)}


def _finisher(h: Harness, ring: RingAllreduce, extra: dict[str, Any]) -> Finisher:
    def finish(result: dict[str, Any]) -> None:
        figures = ring.figures()
        result.update(figures, **extra)
        result["ok"] = result["ok"] and ring.mismatches == 0 and len(ring.step_times) == ring.steps
        if result["completed"] and result["duration_s"] > 0:
            result["goodput_bps"] = figures["bytes"] * 8 / result["duration_s"]
            result["goodput_ratio"] = result["goodput_bps"] / result["capacity_bps"]
    return finish


def allreduce(h: Harness, size: int) -> Finisher:
    ring = RingAllreduce(h, size)
    return _finisher(h, ring, {})


def allreduce_flap(h: Harness, size: int) -> Finisher:
    ring = RingAllreduce(h, size)
    rtt = h.base_rtt_for(0)
    rate = FLAPS_PER_STEP / ring.ideal_step_s()
    flapper = FabricFlapper(h, rate, FLAP_DOWN_RTTS * rtt, h.settings.seed)
    flapper.start(0.0)
    extra: dict[str, Any] = {"flap_rate_per_s": rate, "flap_down_s": FLAP_DOWN_RTTS * rtt}

    def finish(result: dict[str, Any]) -> None:
        _finisher(h, ring, extra)(result)
        result["flaps"] = len(flapper.flaps)
    return finish


def allreduce_reboot(h: Harness, size: int) -> Finisher:
    ring = RingAllreduce(h, size)
    name = h.fabric.t1(0, 0).name
    away = REBOOT_RTTS * h.base_rtt_for(0)
    at: dict[str, float] = {}

    def reboot(step: int) -> None:
        if step == REBOOT_STEP:
            at["down"] = h.loop.now
            h.net.set_switch_up(name, False)
            h.loop.at(h.loop.now + away, h.net.set_switch_up, name, True)
    ring.step_started.append(reboot)

    def finish(result: dict[str, Any]) -> None:
        _finisher(h, ring, {"rebooted_switch": name, "reboot_step": REBOOT_STEP,
                            "reboot_down_s": away, "reboot_at_s": at.get("down")})(result)
        times = ring.step_times
        result["step_time_over_first"] = [t / times[0] for t in times] if times else None
    return finish
