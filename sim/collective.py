"""All-reduce on the simulated fabric, repeated like a synchronous training job. The ring is
the bench's (bench/experiments/allreduce.py): each step is 2(N-1) phases; in each phase every host
writes buffer/N bytes to its ring successor at once, and the phase ends when every write is
complete at both ends. The hierarchical one (`allreduce-2d*`) runs rings within each T0 and
across T0s (hierarchical_allreduce), so a step at 1,024 hosts is 156 phases, not 2,046. Step
time is the sum of its phase times; every phase's data is checked byte for byte at its
receiver. The reduction arithmetic is not modelled.

Scenarios: `allreduce` (nothing fails), `allreduce-flap` (links flap across the fabric:
failures.FabricFlapper at FLAPS_PER_STEP flaps per expected step time, each FLAP_DOWN_RTTS
long)
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


class Collective:
    """Drives the phases of a collective: each phase posts its transfers at once and ends when
    every one of them is complete at both ends; then the next phase starts. `schedule` lists
    the transfers of each phase of one step; a transfer moves the same number of bytes (its
    chunk) each time it is used."""

    def __init__(self, h: Harness, schedule: list[list[Transfer]], buffer_bytes: int,
                 steps: int) -> None:
        self.h, self.steps, self.schedule = h, steps, schedule
        self.buffer_bytes = buffer_bytes
        self.phases = len(schedule)
        self.step_bytes = sum(len(t.data) for phase in schedule for t in phase)
        h.planned_bytes = steps * self.step_bytes
        h.starting = list(schedule[0])
        h.on_idle = self._phase_done
        self.phase_times: list[float] = []
        self.step_times: list[float] = []
        self.mismatches = 0
        self.step_started: list[Callable[[int], None]] = []  # hooks, given each step as it starts
        self._began: float | None = None

    def _phase_done(self) -> None:
        h = self.h
        now = h.loop.now
        done = len(self.phase_times)
        finished = self.schedule[done % self.phases]
        self.mismatches += sum(1 for t in finished if t.failed or bytes(t.buffer) != t.data)
        began = h.start_time if self._began is None else self._began
        self.phase_times.append(now - began)
        done += 1
        if done % self.phases == 0:
            self.step_times.append(sum(self.phase_times[-self.phases:]))
        if done == self.steps * self.phases:
            return  # nothing pending: the run ends here
        if done % self.phases == 0:
            for hook in self.step_started:
                hook(done // self.phases)
        self._began = now
        for t in self.schedule[done % self.phases]:
            h.repost(t, h.rng.randbytes(len(t.data)))

    def ideal_step_s(self) -> float:
        """A step at line rate: in each phase every host sends one chunk through its NICs."""
        h = self.h
        nic_bps = h.fabric.planes * h.settings.rate_bps
        return sum(max(len(t.data) for t in phase) for phase in self.schedule) * 8 / nic_bps

    def expected_step_s(self, base_rtt: float) -> float:
        """What a step should take: line rate, plus an RTT per phase to see it complete. A
        small buffer over many hosts makes steps of RTTs, not of bytes (156 phases at
        hosts-1024), where the ideal alone would be a small fraction of the step."""
        return self.ideal_step_s() + self.phases * base_rtt

    def figures(self) -> dict[str, Any]:
        times = self.step_times
        return {
            "buffer_bytes": self.buffer_bytes, "steps": self.steps,
            "phases_per_step": self.phases, "step_times_s": times,
            "step_time_s": ({"mean": statistics.fmean(times), "max": max(times),
                             "min": min(times)} if times else None),
            "ideal_step_s": self.ideal_step_s(), "phase_mismatches": self.mismatches,
            "step_bytes": self.step_bytes, "bytes": self.step_bytes * len(times)}


def ring_allreduce(h: Harness, buffer_bytes: int, steps: int = STEPS) -> Collective:
    """One ring over every host: 2(N-1) phases of buffer/N bytes to the ring successor."""
    n = h.fabric.hosts
    if n < 3:
        raise ValueError("a ring all-reduce needs at least 3 hosts (each host keeps one "
                         "QP per peer, and with 2 they would write to each other)")
    chunk = -(-buffer_bytes // n)
    ring = [h.add_transfer(i, (i + 1) % n, chunk) for i in range(n)]
    return Collective(h, [ring] * (2 * (n - 1)), chunk * n, steps)


def hierarchical_allreduce(h: Harness, buffer_bytes: int, steps: int = STEPS) -> Collective:
    """Rings within each T0, then across T0s, as large jobs arrange them (2D, 3 stages): a
    reduce-scatter over the g hosts of each T0 (g-1 phases of buffer/g bytes), an all-reduce
    of each host's 1/g share over the m hosts with the same place on every T0 (2(m-1) phases
    of buffer/(g m) bytes, across the spines), an all-gather within each T0 (g-1 phases).
    2(g-1) + 2(m-1) phases a step instead of the ring's 2(gm-1): 156 at hosts-1024."""
    fabric = h.fabric
    g, m = fabric.hosts_per_t0, fabric.t0_per_plane
    if g < 3 or m < 3:
        raise ValueError("a hierarchical all-reduce needs at least 3 T0s and 3 hosts per T0 "
                         "(with 2, ring neighbours would write to each other over one QP)")
    group = [[x for x in range(fabric.hosts) if fabric.nic(x, 0).t0 == t] for t in range(m)]
    inner = -(-buffer_bytes // g)  # each host's share after the reduce-scatter
    outer = -(-inner // m)
    within = [h.add_transfer(hosts[k], hosts[(k + 1) % g], inner)
              for hosts in group for k in range(g)]
    across = [h.add_transfer(group[t][k], group[(t + 1) % m][k], outer)
              for k in range(g) for t in range(m)]
    schedule = [within] * (g - 1) + [across] * (2 * (m - 1)) + [within] * (g - 1)
    return Collective(h, schedule, inner * g, steps)


def _finisher(h: Harness, ring: Collective, extra: dict[str, Any]) -> Finisher:
    def finish(result: dict[str, Any]) -> None:
        figures = ring.figures()
        result.update(figures, **extra)
        result["ok"] = result["ok"] and ring.mismatches == 0 and len(ring.step_times) == ring.steps
        if result["completed"] and result["duration_s"] > 0:
            result["goodput_bps"] = figures["bytes"] * 8 / result["duration_s"]
            result["goodput_ratio"] = result["goodput_bps"] / result["capacity_bps"]
    return finish


Builder = Callable[[Harness, int], Collective]  # ring_allreduce or hierarchical_allreduce


def allreduce(h: Harness, size: int, build: Builder = ring_allreduce) -> Finisher:
    return _finisher(h, build(h, size), {})


def allreduce_flap(h: Harness, size: int, build: Builder = ring_allreduce) -> Finisher:
    ring = build(h, size)
    rtt = h.base_rtt_for(0)
    step = ring.expected_step_s(rtt)
    rate = FLAPS_PER_STEP / step
    flapper = FabricFlapper(h, rate, FLAP_DOWN_RTTS * rtt, h.settings.seed)
    flapper.start(0.0)
    extra: dict[str, Any] = {"flap_rate_per_s": rate, "flap_down_s": FLAP_DOWN_RTTS * rtt,
                             "expected_step_s": step}

    def finish(result: dict[str, Any]) -> None:
        _finisher(h, ring, extra)(result)
        result["flaps"] = len(flapper.flaps)
    return finish


def allreduce_reboot(h: Harness, size: int, build: Builder = ring_allreduce) -> Finisher:
    ring = build(h, size)
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
