"""`--rate auto` for the bench: the rate the bench's heaviest load (every host writes
CALIBRATION_BYTES to host i + hosts/2 with MRC at once) runs faithfully at on this machine.

First the rule of emulation.calibration: the load runs with unlimited ports, and the rate is
HEADROOM of what the busiest port sustained. When that unlimited run does not finish, the rate
comes from a ladder: the same load on a fresh fabric at each rung's rate, from LADDER_START
times what the unlimited run moved, down by LADDER_STEP; the first rung where every write
completes and the fidelity monitor calls the run faithful is the rate. Why, with the hosts-16
runs that showed the unlimited run collapsing: docs/decisions.md, "Port rate".
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from bench.contenders.mrc_flows import FlowSpec
from bench.runner import open_network, run_contender
from emulation.calibration import MIN_RATE, CalibrationError, choice, rate_from
from emulation.fidelity import FAITHFUL, Monitor
from emulation.netconfig import DEFAULT_RX_HOLD_MS
from emulation.network import NetworkConfig
from fabric.topology import Fabric

CALIBRATION_BYTES = 1024 * 1024
UNLIMITED_TIMEOUT_S = 60.0  # 1 MB per host took under 10 s wherever the run did not collapse
RUNG_TIMEOUT_S = 120.0
LADDER_START = 2.0  # a collapsed run moves less than the rate that runs faithfully
LADDER_STEP = 0.7
WHAT = "MRC on every host"


def _specs(fabric: Fabric) -> list[FlowSpec]:
    return [FlowSpec(i, (i + fabric.hosts // 2) % fabric.hosts, CALIBRATION_BYTES)
            for i in range(fabric.hosts)]


def _run(config: NetworkConfig, log: Callable[[str], None],
         timeout: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The load on a fresh fabric: (flows, fidelity report)."""
    with open_network(config, log) as net:
        monitor = Monitor(net)
        monitor.start()
        try:
            flows = run_contender(net, "mrc", _specs(config.fabric), timeout=timeout)
        finally:
            seen = monitor.stop()
    return flows, seen


def ladder(first: int, floor: int = MIN_RATE) -> list[int]:
    """Rates from `first` down by LADDER_STEP, whole packets/s, ending at `floor`."""
    rates = []
    rate = max(first, floor)
    while rate > floor:
        rates.append(rate)
        rate = min(rate - 1, int(rate * LADDER_STEP))
    return [*rates, floor]


def calibrate(target: str, fabric: Fabric, log: Callable[[str], None],
              rx_hold_ms: float = DEFAULT_RX_HOLD_MS) -> dict[str, Any]:
    began = time.monotonic()
    config = NetworkConfig(fabric=fabric, target=target, port_rate_pps=None,
                           rx_hold_ms=rx_hold_ms)
    flows, seen = _run(config, log, UNLIMITED_TIMEOUT_S)
    sustained = seen.get("bottleneck_pps")
    if all(f.get("ok") for f in flows) and sustained:
        rate = rate_from(sustained, WHAT)
        out = choice(rate, sustained, WHAT, config, seen, time.monotonic() - began)
        log(f"calibrated: {rate} packets/s per port: {out['why']}")
        return out
    log(f"calibration: with unlimited ports {WHAT} did not finish in "
        f"{UNLIMITED_TIMEOUT_S:.0f} s ({seen.get('why')}); trying fixed rates")
    return _climb_down(config, sustained or 0.0, seen, log, began)


def _climb_down(config: NetworkConfig, moved: float, unlimited: dict[str, Any],
                log: Callable[[str], None], began: float) -> dict[str, Any]:
    tried = []
    for rate in ladder(int(LADDER_START * moved)):
        flows, seen = _run(dataclasses.replace(config, port_rate_pps=rate), log,
                           RUNG_TIMEOUT_S)
        ok = all(f.get("ok") for f in flows)
        tried.append({"rate_pps": rate, "completed": ok, "verdict": seen.get("verdict"),
                      "bottleneck_pps": seen.get("bottleneck_pps"), "why": seen.get("why")})
        log(f"calibration: {rate} packets/s: {'completed' if ok else 'did not complete'}, "
            f"{seen.get('verdict')} ({seen.get('why')})")
        if ok and seen.get("verdict") == FAITHFUL:
            out = choice(rate, moved, WHAT, config, seen, time.monotonic() - began)
            rates = ", ".join(str(t["rate_pps"]) for t in tried)
            out.update(unlimited=unlimited, ladder=tried, why=(
                f"with unlimited ports {WHAT} did not finish (the busiest port moved "
                f"{moved:.0f} frames/s); of the rates tried ({rates}), {rate} was the "
                "highest at which every write completed and the fidelity monitor called the "
                "run faithful"))
            log(f"calibrated: {rate} packets/s per port: {out['why']}")
            return out
    raise CalibrationError(f"{WHAT} ran faithfully at none of the rates tried down to "
                           f"{MIN_RATE} packets/s: {tried}; free the CPUs, use a smaller "
                           "fabric, or give --rate")
