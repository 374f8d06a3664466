"""Random loss on the fabric's links, for the loss experiment.

`netem` is not available on these machines and tc's gact action module is missing, so loss
comes from nftables: a netdev-family egress chain on every switch port drops `percent` of the
frames it is given (`numgen random`). Egress, because frames a switch or agent reads through
an AF_PACKET socket are handed over before any ingress hook could drop them; switch ports
only, because a drop at a host's own egress reaches its sender as a send error (ENOBUFS), which
kernel TCP would retry at once rather than see as a loss. So every link direction except a
host's first hop loses `percent`: a packet crossing spines meets three lossy hops.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

from emulation.errors import EmulationError

TABLE = "mrc_testbed_loss"  # netdev table in the root namespace; removed by remove_loss()
SCALE = 10_000  # loss in 1/SCALE units: 1% = 100


class ImpairError(EmulationError, RuntimeError):
    """nftables refused the rules; the message has its error."""


def loss_unavailable() -> str | None:
    """Why link loss cannot be emulated here, or None."""
    if shutil.which("nft") is None:
        return "nft (Debian package nftables) is not installed"
    return None


def _nft(args: list[str], script: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["nft", *args], input=script, capture_output=True, text=True,
                          check=False)


def remove_loss() -> None:
    """Delete the loss table if it exists (also after a killed run)."""
    if shutil.which("nft") is not None:
        _nft(["delete", "table", "netdev", TABLE])


class LinkLoss:
    """`with LinkLoss(net, 1.0):` every switch port drops 1% of what it sends."""

    def __init__(self, net: Any, percent: float) -> None:
        if not 0 < percent < 100:
            raise ImpairError(f"loss percent {percent} must be in (0, 100)")
        why = loss_unavailable()
        if why:
            raise ImpairError(why)
        self.net, self.percent = net, percent
        self.ifnames = [ifname for sw in net.fabric.switches
                        for ifname in net.switch_ports(sw.name).values()]

    def __enter__(self) -> LinkLoss:
        threshold = round(self.percent * SCALE / 100)
        chains = "\n".join(
            f'  chain c{i} {{ type filter hook egress device "{ifname}" priority 0; '
            f"numgen random mod {SCALE} < {threshold} counter drop; }}"
            for i, ifname in enumerate(self.ifnames))
        remove_loss()
        done = _nft(["-f", "-"], f"table netdev {TABLE} {{\n{chains}\n}}\n")
        if done.returncode != 0:
            raise ImpairError(f"nft refused the loss rules: {done.stderr.strip()[:300]}")
        return self

    def dropped(self) -> int:
        """Frames the loss rules have dropped so far."""
        out = _nft(["list", "table", "netdev", TABLE]).stdout
        return sum(int(n) for n in re.findall(r"counter packets (\d+)", out))

    def __exit__(self, *exc: object) -> None:
        remove_loss()
