"""Which switch implementation a topology runs: `bmv2`, `soft`, or `auto`.

`auto` is fabric.options.resolve_target's, the one rule of every entry point: BMv2 where
simple_switch_grpc and p4c-bm2-ss are on PATH, else the software switch. Both node classes
take the same keyword arguments and expose the same methods.
"""

from __future__ import annotations

import shutil

from mininet.node import Switch

from fabric.options import TARGETS, resolve_target
from nodes.bmv2_switch import Bmv2Switch
from nodes.errors import NodeError
from nodes.softswitch_node import SoftSwitch

BMV2_BINARY = "simple_switch_grpc"


class TargetError(NodeError, ValueError):
    """Unknown target, or BMv2 requested where it is not installed."""


def resolve(target: str) -> str:
    """The concrete target (`bmv2` or `soft`) for a requested one; `auto` never raises."""
    if target not in TARGETS:
        raise TargetError(f"switch target {target!r} unknown: choose one of {', '.join(TARGETS)}")
    concrete = resolve_target(target)
    if concrete == "bmv2" and shutil.which(BMV2_BINARY) is None:
        raise TargetError(f"target 'bmv2' needs {BMV2_BINARY} on PATH; install p4lang-bmv2 "
                          "or use --target soft / auto")
    return concrete


def switch_class(target: str) -> type[Switch]:
    """The Mininet node class for a target name."""
    return Bmv2Switch if resolve(target) == "bmv2" else SoftSwitch
