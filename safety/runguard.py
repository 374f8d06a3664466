"""Everything a running fabric holds on this machine, taken and given back as one.

A fabric run (MrcNetwork, or `mn --custom topologies/custom.py`) takes, in this order: the
run's private directory (safety.privdir), the fabric lock in it, the cleanup of a killed
run's leftovers (holding the lock proves that run is gone), a new run manifest, the switches'
loopback ports (safety.runports: a port another user holds is replaced), fresh keys
(safety.credentials) with the switches' P4Runtime addresses beside them (p4rt.tls, for
`python -m controller --tls-dir`) and the control-port shield over those ports
(safety.shield), all before any switch starts. `release` gives all of it back: it
sweeps what the manifest still lists (PIDs, interfaces, the shield), removes the manifest and
the run's own work directory, releases the lock and deletes the keys and addresses.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from fabric.topology import Fabric
from p4rt import tls
from safety import credentials, runports, shield
from safety.credentials import RunCredentials
from safety.privdir import PrivateDir
from safety.runports import PortPlan, SwitchPorts
from safety.runstate import RunManifest, acquire_fabric_lock, clean_leftovers, remove_workdir


class RunGuard:
    """The lock, manifest, keys and shield of one fabric run (module docstring)."""

    def __init__(self, fabric: Fabric, workdir: Path | None, own_workdir: bool,
                 lock_timeout: float, log=print, *,
                 make_workdir: Callable[[], Path] | None = None,
                 replace_ports: bool = True) -> None:
        """`make_workdir` makes the run's own work directory (then `workdir` is None): it is
        called once the lock is held and the directory is in the manifest at once, so a run
        killed at any moment before (waiting for the lock, calibrating) leaves none behind,
        and one killed after is cleaned up by the next start. `replace_ports` False keeps
        the fabric's default ports whoever holds them (a cluster run: runports says why)."""
        self.workdir, self.own_workdir = workdir, own_workdir and workdir is not None
        self.rundir = PrivateDir()
        self.lock_fd: int | None = None
        self.manifest: RunManifest | None = None
        self.credentials: RunCredentials | None = None
        self.shield_table: str | None = None
        self.ports = PortPlan.defaults(fabric)
        try:
            self.lock_fd = acquire_fabric_lock(lock_timeout, log, self.rundir)
            clean_leftovers(log, self.rundir)
            if make_workdir is not None:
                self.workdir, self.own_workdir = make_workdir(), True
            self.manifest = RunManifest(self.workdir or Path(""), self.own_workdir, self.rundir)
            if replace_ports:  # no switch of ours runs now: a port in use is someone else's
                self.ports = runports.assign(fabric, log)
            self.credentials = credentials.issue(self.rundir)  # this run's keys only
            self.rundir.write_bytes(tls.ADDRESSES, tls.addresses_file(self.ports.addresses()))
            self.shield_table = shield.install(self.ports.all())
            self.manifest.add_nft_table(self.shield_table)
        except BaseException:
            self.release()
            raise

    def move_switch(self, name: str, fabric: Fabric, log=print) -> SwitchPorts:
        """Switch `name` (its process stopped, a stranger on one of its ports) onto free
        ports: the shield covers them first, then the plan and the addresses beside the
        keys name them. Returns its new ports."""
        if self.shield_table is None:
            raise RuntimeError("the run's guard was released: no switch can move")
        plan = runports.move(self.ports, name, fabric, log)
        shield.extend(self.shield_table, [plan[name].grpc, plan[name].thrift])
        self.ports = plan
        self.rundir.write_bytes(tls.ADDRESSES, tls.addresses_file(plan.addresses()))
        return plan[name]

    def release(self) -> dict[str, int]:
        """Give everything back (safe to call twice); returns what the sweep found."""
        swept = {"processes": 0, "interfaces": 0}
        if self.manifest is not None:
            swept = self.manifest.sweep()  # what the run did not stop: by PID and by name
            self.manifest.remove()
            self.manifest = None
        if self.own_workdir:
            remove_workdir(self.workdir)
            self.own_workdir = False
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the flock
            self.lock_fd = None
        if self.rundir.fd >= 0:
            credentials.withdraw(self.rundir)
            self.rundir.unlink(tls.ADDRESSES)
            self.rundir.close()
        return swept
