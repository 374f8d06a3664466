"""The links' propagation delay (--link-delay) on each switch target.

The software switch delays frames itself (softswitch.queues: a frame that has left its FIFO
goes out on the wire `delay` later; frames from hosts arrive `delay` late), so every target
machine can run a delayed fabric on it. BMv2 has no such thing: its delay would be the
kernel's netem qdisc on the links' ends, which a kernel built without CONFIG_NET_SCH_NETEM
lacks (this project's CI kernel is one). There a delayed fabric on BMv2 is refused before
anything starts, with that reason.
"""

from __future__ import annotations

import shutil
import subprocess

NETEM_PROBE_TIMEOUT_S = 10.0
NETEM_CONFIG = "CONFIG_NET_SCH_NETEM"


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
        return ("--link-delay on BMv2 needs netem on every link end, which this testbed "
                "does not set up yet: use --target soft, whose switches delay frames "
                "themselves")
    return (f"--link-delay on BMv2 needs the kernel's netem qdisc on the links: {why}. Use "
            "--target soft, whose switches delay frames themselves")
