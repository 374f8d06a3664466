"""Runs one sans-IO Endpoint on the host's NICs: the event loop, the NICs and the adapter joined.

Single-threaded and event driven: the loop waits on the NIC sockets, the netlink socket and any
readers the agent adds (control socket, signal wake-up); its timeout is the endpoint's
get_timer() or the earliest agent timer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from host_agent.adapter import EndpointAdapter
from host_agent.core import Endpoint, Event
from host_agent.hostconfig import HostConfig
from host_agent.loop import EventLoop
from host_agent.modes import MRC_MODE, AgentMode
from host_agent.nic import Nics

log = logging.getLogger(__name__)

RX_BATCH = 4  # frames per socket per round: few, so planes stay in arrival order
RX_ROUNDS = 32  # rounds per wake-up: bounds how long netlink, control and timers wait
PUMP_EVERY = 32  # frames read between two sends while draining: SACKs wait for at most these


class Driver:
    """Owns the loop, the NICs and the endpoint's clock; the agent adds its own readers."""

    def __init__(self, endpoint: Endpoint, config: HostConfig, *,
                 on_event: Callable[[Event], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 mode: AgentMode = MRC_MODE, rx_hold: float = 0.0) -> None:
        self.endpoint = endpoint
        self.config = config
        self.loop = EventLoop(clock, hold=rx_hold)
        self.clock = clock
        self.nics = Nics(config.nics, self.loop, on_readable=self._drain_nics,
                         on_link=self._on_link)
        self.adapter = EndpointAdapter(endpoint, config, self.nics.send, on_event=on_event,
                                       accept_peers=True, mode=mode)
        self._drained_at = -1  # the loop's wake-up in which the NICs were last drained

    @property
    def plane_up(self) -> list[bool]:
        return self.nics.up

    @property
    def connected(self) -> set[int]:
        return self.adapter.connected

    def ensure_connected(self, peer: int) -> list[int]:
        return self.adapter.ensure_connected(peer)

    def open(self) -> None:
        self.nics.open()
        now = self.clock()
        for plane, up in enumerate(self.nics.up):
            if not up:
                self.endpoint.set_plane_up(plane, False, now=now)
        self.pump()

    def close(self) -> None:
        self.nics.close()
        self.loop.close()

    def run(self) -> None:
        self.loop.run(self)

    def stop(self) -> None:
        self.loop.stop()

    def pump(self) -> None:
        self.adapter.pump(self.clock())

    # ---- DeadlineSource for the loop ---------------------------------------------------------
    def deadline(self) -> float | None:
        return self.endpoint.get_timer()

    def on_deadline(self, now: float) -> None:
        self.endpoint.handle_timer(now=now)

    def after_wakeup(self) -> None:
        self.pump()

    # ---- NIC callbacks -----------------------------------------------------------------------
    def _drain_nics(self) -> None:
        """Read every NIC until empty (bounded), sending after every PUMP_EVERY frames and at
        the end (one pump per frame would cost a pass over every QP per frame).

        Timers run only after this, so a SACK already sitting in a socket buffer is never
        mistaken for a timeout because the loop was busy with another NIC's backlog. The loop
        calls this for each readable NIC; the first call of a wake-up reads them all, and a NIC
        found empty is not read again before the next wake-up.
        """
        if self._drained_at == self.loop.wakeups:
            return
        self._drained_at = self.loop.wakeups
        receive, on_frame = self.nics.receive, self._on_frame
        planes: list[int] = list(range(self.config.planes))
        unsent = 0
        for _ in range(RX_ROUNDS):
            busy = []
            for plane in planes:
                got = receive(plane, RX_BATCH, on_frame)
                unsent += got
                if got == RX_BATCH:
                    busy.append(plane)
            planes = busy
            if not planes:
                break
            if unsent >= PUMP_EVERY:
                self.pump()
                unsent = 0
        self.pump()

    def _on_frame(self, plane: int, frame: memoryview) -> None:
        try:
            self.adapter.receive_frame(plane, frame, self.clock())
        except Exception:  # a core bug on one packet must not take every QP of the host down
            self.adapter.rx[plane]["rx_core_errors"] += 1
            log.exception("endpoint failed on a frame on plane %d", plane)

    def _on_link(self, plane: int, up: bool) -> None:
        self.endpoint.set_plane_up(plane, up, now=self.clock())

    # ---- statistics --------------------------------------------------------------------------
    @property
    def max_timer_lateness(self) -> float:
        return self.loop.max_lateness

    def driver_stats(self) -> dict[int, dict[str, int]]:
        """Per plane: NIC counters (kernel drops included) and what the adapter refused."""
        return {plane: {**nic, **self.adapter.rx[plane]}
                for plane, nic in self.nics.kernel_stats().items()}

    def route_stats(self) -> dict[str, dict[str, float]]:
        return self.adapter.route_stats()
