"""Non-MRC background traffic: a constant-rate stream that loads chosen spines.

It stands for other tenants' traffic sharing the fabric: baseline DSCP (never trimmed,
tail-dropped), not ECN-capable, no congestion control, so it keeps its rate while the
MRC flow has to move around it.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.network import Network
from wire import DSCP_NO_TRIM, ECN_NOT_ECT, Envelope, encode_frame


class CountingSink:
    """Host handler for the background receiver: counts what arrives."""

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0

    def on_frame(self, plane: int, frame: bytearray) -> None:
        self.frames += 1
        self.bytes += len(frame)

    def on_nic_state(self, plane: int, up: bool) -> None:
        """The background stream has no reaction to port state."""


class ConstantRateSource:
    """Sends `payload`-byte frames from src to dst via `spine` on every plane at `rate_bps`."""

    def __init__(self, net: Network, src: int, dst: int, spine: int, rate_bps: float, *,
                 payload: int = 1024, active: Callable[[], bool] = lambda: True) -> None:
        if rate_bps <= 0:
            raise ValueError("background rate must be positive")
        self.net, self.src = net, src
        self.active = active
        self.sent = 0
        self._frames: list[bytes] = []
        fabric = net.fabric
        for plane in range(fabric.planes):
            path = next(p for p in fabric.paths(src, dst, plane) if p.spine == spine)
            env = Envelope(path.src.mac, fabric.t0(plane, path.src.t0).mac, path.src.address,
                           path.address, path.src.address, path.dst.address, plane + 1,
                           DSCP_NO_TRIM, ECN_NOT_ECT)
            self._frames.append(encode_frame(env, bytes(payload)))
        self.interval = len(self._frames[0]) * 8 / rate_bps

    def start(self, at: float) -> None:
        for plane in range(len(self._frames)):
            self.net.loop.at(at, self._tick, plane)

    def _tick(self, plane: int) -> None:
        if not self.active():
            return
        self.net.hosts[self.src].send(plane, bytearray(self._frames[plane]))
        self.sent += 1
        self.net.loop.after(self.interval, self._tick, plane)
