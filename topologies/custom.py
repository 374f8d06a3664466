"""The MRC fabrics for `mn --custom`: same names, ports and MACs as fabric.topology.

    sudo .venv/bin/python /usr/bin/mn --custom topologies/custom.py \\
        --topo mrc,4,2,2,2 --switch mrcsoft --controller none
    # then, from another shell, program it with the run's keys:
    sudo .venv/bin/python -m controller install --planes 4 --t0 2 --t1 2 --hosts-per-t0 2 \
        --tls-dir /run/mrc-testbed

Run mn with the project's virtualenv python (the switch needs grpc).
`--topo mrc,P,T0,T1,H` takes planes, T0 and T1 switches per plane and hosts per T0
(default 4,2,2,2); `mrcbase` is the single-plane ECMP baseline fabric. `--switch mrcsoft` is
the software switch, `mrcbmv2` BMv2 (when installed). Hosts get no IPv4 address; MRC needs
the host agents (`python -m host_agent.agent`) or topologies/two_tier.py, which does all
of this in one go.

Caution: when mn fails (for example because another fabric already uses these interface
names) it runs its own cleanup, which kills every Mininet process on the machine by matching
names, other users' fabrics included. two_tier.py and MrcNetwork never do that. To avoid the
collision, the `mrc` factory takes the machine-wide fabric lock of emulation.network before
it builds the graph (MrcTopo, which has no side effect), waiting while another fabric runs,
then for its interfaces to go away, and holds it until mn exits. Like MrcNetwork, it issues
the run's keys into the private run directory (P4Runtime over mutual TLS, the software
switch's control token) and shields the switches' control ports (safety.shield); both go
when mn exits, or with the next run's cleanup (the run manifest) if mn is killed.
"""

from __future__ import annotations

import atexit
import sys
import time
from pathlib import Path

# mn exec()s this file without __file__; the code object still knows its path.
_REPO = Path(sys._getframe().f_code.co_filename).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from emulation.mrctopo import MrcTopo  # noqa: E402
from emulation.network import wait_interfaces_gone  # noqa: E402
from fabric.topology import Fabric  # noqa: E402
from nodes.bmv2_switch import Bmv2Switch  # noqa: E402
from nodes.softswitch_node import SoftSwitch  # noqa: E402
from safety.runguard import RunGuard  # noqa: E402

LOCK_TIMEOUT = 600.0  # seconds mn waits for another fabric on this machine


_guard: list[RunGuard] = []  # this mn process's lock, keys and shield, released at exit


def _protect(fabric: Fabric) -> RunGuard:
    """Take the fabric lock, the run's keys and the shield (safety.runguard), and give
    them back when mn exits."""
    guard = RunGuard(fabric, None, False, LOCK_TIMEOUT)
    _guard.append(guard)
    atexit.register(guard.release)
    return guard


def mrc_topo(planes: int = 4, t0: int = 2, t1: int = 2, hosts_per_t0: int = 2) -> MrcTopo:
    """`--topo mrc,P,T0,T1,H`: take this mn process's lock, ports, keys and shield (waiting
    for another fabric and its interfaces to go), then the pure graph with the run's
    credentials and ports on every switch."""
    fabric = Fabric(planes, t0, t1, hosts_per_t0)
    if not _guard:
        deadline = time.monotonic() + LOCK_TIMEOUT
        _protect(fabric)
        wait_interfaces_gone(fabric, deadline)
    return MrcTopo(fabric=fabric, switch_opts={"credentials": _guard[0].credentials},
                   ports=_guard[0].ports)


def baseline_topo(t0: int = 2, t1: int = 2, hosts_per_t0: int = 2) -> MrcTopo:
    return mrc_topo(1, t0, t1, hosts_per_t0)


topos = {"mrc": mrc_topo, "mrcbase": baseline_topo}
switches = {"mrcsoft": SoftSwitch, "mrcbmv2": Bmv2Switch}
