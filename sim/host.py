"""A simulated host: the shared EndpointAdapter on the simulator's NICs and clock.

The simulator's stand-in for the raw-socket driver: frames from the simulated network go to
the adapter, frames from the adapter go to the host's simulated NICs, and the endpoint's timer
becomes an event on the simulation loop.
"""

from __future__ import annotations

from collections.abc import Callable

from host_agent.adapter import EndpointAdapter
from host_agent.core import Endpoint, Event
from host_agent.hostconfig import HostConfig
from host_agent.modes import MRC_MODE, AgentMode
from sim.engine import SimulationError
from sim.network import Network

# An endpoint that asks to be woken at the same instant this many times in a row is stuck.
_MAX_TIMER_SPINS = 10_000

EventListener = Callable[[float, "HostAdapter", Event], None]


class HostAdapter(EndpointAdapter):
    """Drives one Endpoint on one simulated host."""

    def __init__(self, net: Network, host: int, endpoint: Endpoint,
                 listener: EventListener | None = None, mode: AgentMode = MRC_MODE) -> None:
        node = net.hosts[host]
        super().__init__(endpoint, HostConfig.from_fabric(net.fabric, host),
                         lambda plane, frame: node.send(plane, bytearray(frame)),
                         on_event=self._on_event, mode=mode)
        self.net, self.host = net, host
        self.loop = net.loop
        self.listener = listener
        net.attach(host, self)
        self._wake_at: float | None = None
        self._spins = 0
        self._spin_time = -1.0

    @property
    def malformed(self) -> int:
        """Frames the adapter refused (undecodable or from no known host)."""
        return sum(rx["rx_malformed"] + rx["rx_unknown_peer"] + rx["rx_non_mrc"]
                   for rx in self.rx)

    def _on_event(self, event: Event) -> None:
        if self.listener is not None:
            self.listener(self.loop.now, self, event)

    # --- network -> endpoint ---------------------------------------------------------------
    def on_frame(self, plane: int, frame: bytes) -> None:
        self.receive_frame(plane, frame, self.loop.now)
        self.wake()

    def on_nic_state(self, plane: int, up: bool) -> None:
        self.endpoint.set_plane_up(plane, up, now=self.loop.now)
        self.wake()

    # --- endpoint -> network ---------------------------------------------------------------
    def wake(self) -> None:
        """Send what the endpoint has, hand its events on, and (re)arm its timer."""
        now = self.loop.now
        self.pump(now)
        when = self.endpoint.get_timer()
        if when is None:
            return
        when = max(when, now)
        if self._wake_at is None or when < self._wake_at:
            self._wake_at = when
            self.loop.at(when, self._on_wake)

    def _on_wake(self) -> None:
        now = self.loop.now
        if self._wake_at is not None and self._wake_at <= now:
            self._wake_at = None
        when = self.endpoint.get_timer()
        if when is not None and when <= now:
            if now == self._spin_time:
                self._spins += 1
                if self._spins > _MAX_TIMER_SPINS:
                    raise SimulationError(f"h{self.host}: endpoint timer stuck at t={now}")
            else:
                self._spin_time, self._spins = now, 0
            self.endpoint.handle_timer(now=now)
        self.wake()
