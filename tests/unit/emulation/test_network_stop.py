"""MrcNetwork.stop() under a second Ctrl-C (issue 13, item 8): the recorded processes are
killed, and no Mininet command is left waiting on a node shell that was killed with them.

Before: a second SIGINT while Mininet was deleting links killed the host shells, and the
next `ip link del` waited for their output forever (tests/e2e/test_teardown.py hung)."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from emulation.network import MrcNetwork, NetworkConfig

pytestmark = pytest.mark.timeout(60)


class FakeManifest:
    def __init__(self) -> None:
        self.swept = False

    def live_pids(self) -> list[int]:
        return []

    def sweep(self) -> dict[str, int]:
        self.swept = True
        return {"processes": 0, "interfaces": 0}

    def remove(self) -> None:
        pass


class FakeGuard:
    """The run's lock, keys and shield (safety.runguard), reduced to its manifest."""

    def __init__(self, manifest: FakeManifest) -> None:
        self.manifest = manifest

    def release(self) -> dict[str, int]:
        return self.manifest.sweep()


class HangingMininet:
    """Mininet whose stop() meets a killed shell: it waits until something interrupts it."""

    hosts: list = []
    switches: list = []

    def __init__(self, second_interrupt_after: float | None) -> None:
        self.started = self.finished = False
        self._after = second_interrupt_after

    def stop(self) -> None:
        self.started = True
        if self._after is not None:  # the first Ctrl-C now, the second while it waits
            os.kill(os.getpid(), signal.SIGINT)
            threading.Timer(self._after, os.kill, (os.getpid(), signal.SIGINT)).start()
        time.sleep(20)
        self.finished = True


class InterruptedAgent:
    host = 0

    def stop(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)


def _network(tmp_path: Path, logs: list[str]) -> tuple[MrcNetwork, FakeManifest]:
    net = MrcNetwork(NetworkConfig(target="soft"), workdir=tmp_path, log=logs.append)
    manifest = FakeManifest()
    net._guard = FakeGuard(manifest)  # type: ignore[assignment]
    return net, manifest


def test_a_second_interrupt_abandons_a_mininet_stop_that_waits(tmp_path: Path) -> None:
    logs: list[str] = []
    net, manifest = _network(tmp_path, logs)
    mininet = HangingMininet(second_interrupt_after=0.2)
    net.net = mininet  # type: ignore[assignment]
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        net.stop()
    assert time.monotonic() - start < 10
    assert mininet.started and not mininet.finished
    assert manifest.swept
    assert any("Mininet stop abandoned" in line for line in logs), logs


def test_after_a_second_interrupt_mininet_is_not_asked_to_stop(tmp_path: Path) -> None:
    logs: list[str] = []
    net, manifest = _network(tmp_path, logs)
    mininet = HangingMininet(second_interrupt_after=None)
    net.net = mininet  # type: ignore[assignment]
    net.agents = {0: InterruptedAgent(), 1: InterruptedAgent()}  # type: ignore[dict-item]
    with pytest.raises(KeyboardInterrupt):
        net.stop()
    assert not mininet.started and manifest.swept
    assert any("second interrupt: stopped by PID and name" in line for line in logs), logs


@pytest.mark.parametrize("interrupt", [SystemExit(143), KeyboardInterrupt()])
def test_an_exit_during_start_stops_what_was_started(tmp_path: Path, interrupt: BaseException,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench turns SIGTERM into SystemExit; one that lands while start() is still building
    must stop the half-built fabric too (before: only KeyboardInterrupt did, and a SIGTERM
    during start left 24 switches and 8 agents running)."""
    logs: list[str] = []
    net, manifest = _network(tmp_path, logs)

    def half_built() -> None:
        net.agents = {0: StoppableAgent()}  # type: ignore[dict-item]
        raise interrupt

    monkeypatch.setattr(net, "_start", half_built)
    with pytest.raises(type(interrupt)):
        net.start()
    assert net.agents[0].stopped and manifest.swept  # type: ignore[attr-defined]


class StoppableAgent:
    host = 0
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_a_refusal_before_anything_starts_leaves_no_work_directory(monkeypatch) -> None:
    """start() refused up front (memory, netem, calibration) by a caller that does not use
    the network as a context manager (the bench's open_network): no work directory was made,
    since the run's guard makes it once the run is recorded."""
    from emulation import capacity
    from emulation.network import NetworkError

    def refuse(*_args: object) -> None:
        raise capacity.CapacityError("does not fit")
    monkeypatch.setattr(capacity, "check", refuse)
    before = set(Path(tempfile.gettempdir()).glob("mrc-net-*"))
    net = MrcNetwork(NetworkConfig(target="soft"), log=lambda *_: None)
    with pytest.raises(NetworkError, match="does not fit"):
        net.start()
    assert set(Path(tempfile.gettempdir()).glob("mrc-net-*")) == before
    net.stop()  # a second stop (or a stop of a network never started) removes nothing else


def test_the_work_directory_is_made_only_once_the_run_is_recorded(tmp_path, monkeypatch) -> None:
    """A run killed while it calibrates or waits for the lock has no work directory yet (two
    of them, the calibration's and the run's, existed at once before, and a SIGKILL during
    calibration left the run's behind: tests/e2e/test_teardown's killed run). The guard
    makes it after taking the lock, and its manifest names it."""
    from fabric.topology import Fabric
    from safety import runguard
    from safety.privdir import RUN_DIR_ENV

    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))  # a private run directory of its own
    steps: list[str] = []
    real_lock = runguard.acquire_fabric_lock

    def lock(*args: object, **kwargs: object) -> int:
        steps.append("lock")
        return real_lock(*args, **kwargs)

    def make() -> Path:
        steps.append("workdir")
        return Path(tempfile.mkdtemp(prefix="mrc-net-", dir=tmp_path))
    monkeypatch.setattr(runguard, "acquire_fabric_lock", lock)
    monkeypatch.setattr(runguard.shield, "install", lambda ports: "no_shield")  # no nftables
    monkeypatch.setattr(runguard.RunManifest, "add_nft_table", lambda self, name: None)
    guard = runguard.RunGuard(Fabric(1, 2, 1, 1), None, True, 5.0, log=lambda *_: None,
                              make_workdir=make)
    try:
        workdir = guard.workdir
        assert steps == ["lock", "workdir"] and workdir is not None and workdir.is_dir()
        assert guard.own_workdir and guard.manifest is not None
        assert guard.manifest.data["workdir"] == str(workdir)
        assert guard.manifest.data["own_workdir"] is True
    finally:
        guard.release()
    assert not workdir.exists()


def test_a_work_directory_left_behind_goes_with_its_owner() -> None:
    """The safety net: a work directory whose owner's stop() never ran (a caller that forgot
    it, a path not yet found) goes when the owner is collected."""
    import gc

    from safety.runstate import make_workdir

    class Owner:
        pass
    owner = Owner()
    workdir = make_workdir(owner)
    assert workdir.is_dir()  # left behind
    del owner
    gc.collect()
    assert not workdir.exists()
