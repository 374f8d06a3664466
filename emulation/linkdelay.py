"""The links' propagation delay (--link-delay) on each switch target.

The software switch delays frames itself (softswitch.queues: a frame that has left its FIFO
goes out on the wire `delay` later; frames from hosts arrive `delay` late), so every target
machine can run a delayed fabric on it. BMv2 has no such thing, so there the kernel's netem
qdisc delays each direction of a link once: at the root of every switch end (the frames the
switch sends to a switch or a host) and as the leaf of both class queues of every host NIC
(the frames a host sends, after or instead of its pacing, emulation.nicpacing). A link taken
down is a blackhole at the switch ends (emulation.faults); bringing it up puts netem back.
A kernel built without CONFIG_NET_SCH_NETEM (this project's CI kernel is one) has none: there
a delayed fabric on BMv2 is refused before anything starts, with that reason.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from typing import TYPE_CHECKING

from emulation.netconfig import NetworkConfig, NetworkError
from emulation.nicpacing import CONTROL_RATE_FACTOR

if TYPE_CHECKING:
    from mininet.net import Mininet

NETEM_PROBE_TIMEOUT_S = 10.0
NETEM_CONFIG = "CONFIG_NET_SCH_NETEM"
NETEM_LIMIT_MIN = 1000  # netem's own default limit, in frames
NETEM_UNPACED_LIMIT = 100_000  # an unpaced port has no rate to size from


def netem_unavailable() -> str | None:
    """Why this kernel cannot run netem, or None. Probed in a network namespace of its own
    (on its loopback), so nothing of the machine's is touched."""
    for tool in ("unshare", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(
        ["unshare", "--net", "sh", "-c",
         "ip link set lo up && tc qdisc add dev lo root netem delay 1ms"],
        capture_output=True, text=True, timeout=NETEM_PROBE_TIMEOUT_S, check=False)
    if probe.returncode == 0:
        return None
    said = (probe.stderr or probe.stdout).strip().splitlines()
    return (f"this kernel has no netem qdisc ({NETEM_CONFIG} is not set; tc said: "
            f"{said[0] if said else 'nothing'})")


def refuse_on_bmv2(delay_s: float, target: str) -> str | None:
    """The reason a delayed fabric cannot run on `target`, or None."""
    if not delay_s or target != "bmv2":
        return None
    why = netem_unavailable()
    if why is None:
        return None
    return (f"--link-delay on BMv2 needs the kernel's netem qdisc on the links: {why}. Use "
            "--target soft, whose switches delay frames themselves")


def netem_limit(delay_s: float, port_rate_pps: int | None, queue_depth: int) -> int:
    """Frames one link end holds: what its port sends during the delay (data and control
    queues at their rates) plus twice the queue, at least netem's own default."""
    if port_rate_pps is None:
        return NETEM_UNPACED_LIMIT
    in_flight = math.ceil(port_rate_pps * (1 + CONTROL_RATE_FACTOR) * delay_s)
    return max(NETEM_LIMIT_MIN, in_flight + 2 * queue_depth)


def netem_qdisc(delay_s: float, limit: int) -> str:
    """The qdisc (after `tc qdisc ... root` or `parent X`) that delays every frame."""
    if not delay_s > 0:
        raise ValueError(f"a netem delay must be > 0 s, got {delay_s!r}")
    return f"netem delay {round(delay_s * 1e6)}us limit {limit}"


def link_end_qdisc(config: NetworkConfig) -> str | None:
    """The qdisc that delays a link's frames on BMv2: the root of every switch end, the leaf
    of a host NIC's queues; None when the fabric has no delay or its switches delay frames
    themselves."""
    if not config.link_delay_s or config.target != "bmv2":
        return None
    return netem_qdisc(config.link_delay_s,
                       netem_limit(config.link_delay_s, config.port_rate_pps,
                                   config.queue_depth))


def delay_switch_ends(net: Mininet, config: NetworkConfig) -> None:
    """netem on every data interface of every BMv2 switch (nothing on the software switch)."""
    qdisc = link_end_qdisc(config)
    if qdisc is None:
        return
    for node in net.switches:
        for ifname in node._data_ports().values():
            cmd = f"tc qdisc replace dev {ifname} root {qdisc}"
            out = node.cmd(cmd).strip()
            if out:
                raise NetworkError(f"{node.name}: {cmd}: {out}")
