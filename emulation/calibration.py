"""`--rate auto`: the port rate this machine emulates faithfully, measured for the fabric, the
target and the workload at hand (bench.calibrate runs the bench's heaviest load through it; the
demo and the Mininet CLI run the demo's transfer).

The fabric is started with no port rate, so switches and agents go as fast as their processes
can; the workload runs under the fidelity monitor (emulation.fidelity), whose bottleneck figure
is the busiest port's full-frame equivalents per second. The chosen rate is HEADROOM of that,
rounded down (to ROUND packets/s from 100 up, to whole packets below): the ports, not the
CPUs, then limit the real run. Measured on 2 cores (software switch, the bench's permutation):
ports sustained 203 frames/s; at 80 pps the CPUs were 85% busy (ports at 0.94 of rate), at
100 pps 92% (0.92), so HEADROOM is 0.4, not the 0.5 that left no margin for noise. On hosts-16
with every host sending at once the ports sustained 37 frames/s (16 agents fill the CPUs), and
a floor of 20 refused that fabric; the floor is MIN_RATE = 10 (docs/decisions.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from emulation.errors import EmulationError
from emulation.fidelity import Monitor
from emulation.netconfig import NetworkConfig

HEADROOM = 0.4
ROUND = 10
MIN_RATE = 10  # below this, base RTTs reach seconds: a machine this slow cannot run the bench
TRANSFER_BYTES = 8 * 1024 * 1024  # about 1 s of one unpaced MRC flow on this machine


class CalibrationError(EmulationError, RuntimeError):
    """The machine could not sustain a usable rate; the message says what was measured."""


def rate_from(sustained: float, what: str) -> int:
    """HEADROOM of the sustained per-port rate, rounded down; refuses a useless rate."""
    rate = int(HEADROOM * sustained)
    if rate >= 10 * ROUND:
        rate = rate // ROUND * ROUND
    if rate < MIN_RATE:
        raise CalibrationError(f"the emulation sustained only {sustained:.0f} frames/s per port "
                               f"with {what} (rate {rate} < {MIN_RATE}); free the CPUs or give "
                               "--rate")
    return rate


def choice(rate: int, sustained: float, what: str, config: NetworkConfig,
           seen: dict[str, Any], seconds: float) -> dict[str, Any]:
    """What a report says about the rate it picked and why."""
    f = config.fabric
    return {"rate_pps": rate, "sustained_pps": sustained, "headroom": HEADROOM,
            "workload": what, "target": config.target, "calibration_s": seconds,
            "fabric": [f.planes, f.t0_per_plane, f.t1_per_plane, f.hosts_per_t0],
            "monitor": seen,
            "why": (f"with unlimited ports, {what} drove the busiest port to {sustained:.0f} "
                    f"frames/s on this machine; {HEADROOM:.0%} of it leaves the CPUs room, so "
                    "the emulated links, not the processes, set the pace")}


def calibrate_transfer(network: Callable[..., Any], config: NetworkConfig, src: int, dst: int,
                       log: Callable[[str], None] = print,
                       nbytes: int = TRANSFER_BYTES) -> dict[str, Any]:
    """The rate for one MRC transfer src -> dst on config's fabric and target (the demo's).
    `network`: emulation.network.MrcNetwork, passed in by that class, which calls this for
    port_rate_pps "auto" (so neither module imports the other)."""
    what = f"one MRC transfer h{src} -> h{dst}"
    began = time.monotonic()
    free = dataclasses.replace(config, port_rate_pps=None, base_rtt=None)
    with network(free, log=lambda m: log(f"calibration: {m}")) as net:
        net.start()
        monitor = Monitor(net)
        monitor.start()
        try:
            result = net.transfer(src, dst, nbytes)
        finally:
            seen = monitor.stop()
    sustained = seen.get("bottleneck_pps")
    if not result.get("ok") or not sustained:
        raise CalibrationError(f"calibration transfer failed: {result.get('error')}, monitor "
                               f"{seen.get('why')}; give --rate PPS instead")
    rate = rate_from(sustained, what)
    out = choice(rate, sustained, what, config, seen, time.monotonic() - began)
    log(f"rate: {rate} packets/s per port, calibrated in {out['calibration_s']:.1f} s: "
        f"{out['why']}")
    return out
