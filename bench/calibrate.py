"""`--rate auto` for the bench: the rule of topologies.calibration (HEADROOM of what the ports
sustain unlimited) applied to the bench's heaviest load: every host writes CALIBRATION_BYTES
to host i + hosts/2 with MRC at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.mrc_flows import FlowSpec
from bench.runner import open_network, run_contender
from fabric.topology import Fabric
from topologies.calibration import CalibrationError, choice, rate_from
from topologies.fidelity import Monitor
from topologies.netconfig import DEFAULT_RX_HOLD_MS
from topologies.network import NetworkConfig

CALIBRATION_BYTES = 1024 * 1024


def calibrate(target: str, fabric: Fabric, log: Callable[[str], None],
              rx_hold_ms: float = DEFAULT_RX_HOLD_MS) -> dict[str, Any]:
    began = time.monotonic()
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
    what = "MRC on every host"
    rate = rate_from(sustained, what)
    out = choice(rate, sustained, what, config, seen, time.monotonic() - began)
    log(f"calibrated: {rate} packets/s per port: {out['why']}")
    return out
