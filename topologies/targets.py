"""Which switch implementation a topology runs: `bmv2`, `soft`, or `auto`.

`auto` picks BMv2 when simple_switch_grpc is on PATH, else the software switch; both
node classes take the same keyword arguments and expose the same methods.
"""

from __future__ import annotations

import shutil

from mininet.node import Switch

from topologies.bmv2_switch import Bmv2Switch
from topologies.softswitch_node import SoftSwitch

TARGETS = ("bmv2", "soft", "auto")
BMV2_BINARY = "simple_switch_grpc"


class TargetError(ValueError):
    """Unknown target, or BMv2 requested where it is not installed."""


def resolve(target: str) -> str:
    """The concrete target (`bmv2` or `soft`) for a requested one."""
    if target not in TARGETS:
        raise TargetError(f"switch target {target!r} unknown: choose one of {', '.join(TARGETS)}")
    bmv2 = shutil.which(BMV2_BINARY) is not None
    if target == "auto":
        return "bmv2" if bmv2 else "soft"
    if target == "bmv2" and not bmv2:
        raise TargetError(f"target 'bmv2' needs {BMV2_BINARY} on PATH; install p4lang-bmv2 "
                          "or use --target soft / auto")
    return target


def switch_class(target: str) -> type[Switch]:
    """The Mininet node class for a target name."""
    return Bmv2Switch if resolve(target) == "bmv2" else SoftSwitch
