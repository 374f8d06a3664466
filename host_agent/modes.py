"""How an agent uses the fabric: MRC spraying, or RoCE-like QPs each pinned to one plane.

`mrc`: one QP per peer over every route (all planes, all spines), per-packet EV choice.
`roce`: K QPs per peer ("lanes"), lane k on plane k mod planes, each with one EV whose outer
destination is the peer's NIC address, so the switches' baseline ECMP pins each QP to one
path by its hash (the EV's flow label and UDP source port, random per QP); go-back-N. A write
is striped over the lanes in MTU-aligned parts, as collective libraries split a message over
their channels' QPs. `roce` with one QP is the plane-0-only `single_port` baseline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from host_agent.core import EndpointConfig, EvConfig, PathInfo, RecoveryMode
from host_agent.errors import HostAgentError
from host_agent.hostconfig import Carrier, HostConfig

MAX_QPS = 64  # QPs per peer a roce agent opens: the paper's largest sweep is 16
MRC = "mrc"
ROCE = "roce"
SINGLE_PORT = "single_port"
MODE_HELP = ("mrc (spray one QP over every plane and spine, default), roce (one QP per plane, "
             "each hash-pinned by the switches' ECMP, go-back-N; writes striped over them), "
             "roce:K (K QPs spread over the planes) or single_port (one QP on plane 0)")
_SPEC = re.compile(r"^(mrc|single_port|roce)(?::(\d+))?$")


class ModeError(HostAgentError, ValueError):
    """An agent mode that does not parse; the message lists the valid forms."""


@dataclass(frozen=True)
class AgentMode:
    kind: str = MRC  # MRC or ROCE
    qps: int = 1  # QPs (lanes) per peer

    def __post_init__(self) -> None:
        if self.kind not in (MRC, ROCE):
            raise ModeError(f"agent mode {self.kind!r}: use {MRC!r} or {ROCE!r}")
        if not 1 <= self.qps <= MAX_QPS or (self.kind == MRC and self.qps != 1):
            raise ModeError(f"{self.kind} with {self.qps} QPs: MRC runs one QP per peer, "
                            f"roce 1..{MAX_QPS}")

    @classmethod
    def parse(cls, text: str, planes: int) -> AgentMode:
        """'mrc', 'single_port' (= roce:1), 'roce' (one QP per plane) or 'roce:K'."""
        m = _SPEC.match(text)
        if m is None:
            raise ModeError(f"agent mode {text!r}: use mrc, single_port, roce or roce:K "
                            f"(K QPs per peer, 1..{MAX_QPS})")
        kind, count = m.group(1), m.group(2)
        if kind == SINGLE_PORT:
            return cls(ROCE, 1)
        if kind == ROCE:
            return cls(ROCE, int(count) if count else planes)
        if count:
            raise ModeError(f"agent mode {text!r}: MRC sprays one QP; drop ':{count}'")
        return cls(MRC, 1)

    @property
    def name(self) -> str:
        if self.kind == MRC:
            return MRC
        return SINGLE_PORT if self.qps == 1 else f"{ROCE}:{self.qps}"

    @property
    def is_mrc(self) -> bool:
        return self.kind == MRC

    def lane_paths(self, config: HostConfig, peer: int, lane: int) -> tuple[PathInfo, ...]:
        """The routes lane `lane`'s QP to `peer` may use."""
        if not 0 <= lane < self.qps:
            raise ModeError(f"lane {lane}: this agent runs {self.qps} QP(s) per peer")
        if self.kind == MRC:
            return config.paths[peer]
        plane = lane % config.planes
        return (PathInfo(plane=plane, route=Carrier(config.peer_address[(peer, plane)])),)


def stripe(length: int, lanes: int, unit: int) -> list[tuple[int, int]]:
    """(offset, length) parts of a `length`-byte message over `lanes` QPs, `unit`-aligned so
    no part adds a short packet; fewer parts when the message is short."""
    if length < 1 or lanes < 1 or unit < 1:
        raise ValueError(f"stripe({length}, {lanes}, {unit}): all must be >= 1")
    units = -(-length // unit)
    per = -(-units // lanes) * unit
    return [(off, min(per, length - off)) for off in range(0, length, per)]


MRC_MODE = AgentMode()


def roce_endpoint_config(base_rtt: float, line_rate_bps: float | None = None,
                         **overrides: Any) -> EndpointConfig:
    """Per QP: one EV, no backups, the floor at one EV (a failed path keeps being retried, as
    in RoCE), go-back-N recovery, and a window a timeout does not shrink (RoCE has no window;
    DCQCN lowers the rate on congestion notifications only, so after a timeout a QP resends
    at the rate it had: docs/decisions.md, "The RoCE-like baseline keeps its rate")."""
    ev = EvConfig.for_base_rtt(base_rtt, evs_per_connection=1, backups_per_plane=0,
                               ev_min_active=1)
    return EndpointConfig.for_base_rtt(base_rtt, line_rate_bps, ev=ev,
                                       recovery=RecoveryMode.GO_BACK_N,
                                       cc_overrides={"timeout_factor": 1.0}, **overrides)
