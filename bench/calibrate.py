"""`--rate auto`: a port rate this machine can emulate faithfully, measured before the run.

The fabric is started with no port rate (switches forward as fast as their processes can) and
every host writes CALIBRATION_BYTES to host i + hosts/2 with MRC, the heaviest load the bench
puts on it. The fidelity monitor's bottleneck figure (the busiest port's full-frame equivalents
per second over the run's traffic time) is what the emulation sustains per port under that
load; the rate is HEADROOM of it, rounded down to ROUND pps, so the ports, not the CPUs, limit
the real runs. Measured on 2 cores (soft switch): the calibration sustained 203 frames/s; the
MRC permutation then kept the CPUs 85% busy at 80 pps (ports at 0.94 of rate) and 92% at 100
(0.92), so HEADROOM is 0.4, not the 0.5 that left no margin for the other contenders and the
noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.fidelity import Monitor
from bench.mrc_flows import FlowSpec
from bench.runner import open_network, run_contender
from fabric.topology import Fabric
from topologies.netconfig import DEFAULT_RX_HOLD_MS
from topologies.network import NetworkConfig

CALIBRATION_BYTES = 1024 * 1024
HEADROOM = 0.4
ROUND = 10
MIN_RATE = 20  # below this, base RTTs reach seconds: a machine this slow cannot run the bench


class CalibrationError(RuntimeError):
    """The machine could not sustain a usable rate; the message says what was measured."""


def calibrate(target: str, fabric: Fabric, log: Callable[[str], None],
              rx_hold_ms: float = DEFAULT_RX_HOLD_MS) -> dict[str, Any]:
    specs = [FlowSpec(i, (i + fabric.hosts // 2) % fabric.hosts, CALIBRATION_BYTES)
             for i in range(fabric.hosts)]
    config = NetworkConfig(fabric=fabric, target=target, port_rate_pps=None,
                           rx_hold_ms=rx_hold_ms)
    with open_network(config, log) as net:
        monitor = Monitor(net)
        monitor.start()
        try:
            flows = run_contender(net, "mrc", specs, timeout=120.0)
        finally:
            seen = monitor.stop()
    sustained = seen.get("bottleneck_pps")
    if not sustained or not all(f.get("ok") for f in flows):
        raise CalibrationError(f"calibration run failed: {[f.get('error') for f in flows]}, "
                               f"monitor {seen.get('why')}; give --rate PPS instead")
    rate = int(HEADROOM * sustained) // ROUND * ROUND
    if rate < MIN_RATE:
        raise CalibrationError(f"the emulation sustained only {sustained:.0f} frames/s per port "
                               f"(rate {rate} < {MIN_RATE}); free the CPUs or give --rate")
    log(f"calibrated: ports sustained {sustained:.0f} frames/s with MRC on every host; "
        f"running at {rate} packets/s per port ({HEADROOM:.0%} of it)")
    return {"rate_pps": rate, "sustained_pps": sustained, "headroom": HEADROOM,
            "fabric": [fabric.planes, fabric.t0_per_plane, fabric.t1_per_plane,
                       fabric.hosts_per_t0], "monitor": seen}
