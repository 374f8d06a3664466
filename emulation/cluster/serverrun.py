"""A fabric run's hold on another server of a cluster: lock, manifest, keys, shield, cleanup.

On its own machine a run takes safety.runguard.RunGuard. On every other server of a
cluster, this module's `python -m emulation.cluster.serverrun` does the same there, started over
ssh by the first server (ServerRun) and living exactly as long as that ssh session:
- it takes the server's fabric lock in the server's private run directory (so two runs never
  share a server's interface names), cleans up after a killed run recorded there, writes a
  manifest, installs the control-port shield over the ports of the switches placed on it, and
  makes the run's work directory there (logs, agents' control sockets);
- it is told over its stdin what the run creates on the server (PIDs, interfaces) and is
  handed the switches' server-side keys and token (never the controller's client key); it
  cuts and mends links between servers on request (emulation.cluster.cablecut), and loads the run's
  VXLAN guard (emulation.cluster.vxguard) and switch-port guard (safety.portguard) there;
- when told to release, or when its stdin ends because the first server's process or its ssh
  client died however it died, it sweeps what the manifest lists (by PID and start time, and
  by interface name), removes the shield, the guards and any cut table, the keys, the
  manifest and the work directory, and unlocks. So a killed first server leaves nothing on
  the others.

The session has no terminal (ssh -T): a terminal would echo and cap the lines. Each request is
one JSON line; each answer one line starting with ANSWER (anything else it prints is a log
line, kept in the first server's log).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emulation.cluster import vxguard
from emulation.cluster.cablecut import CableCuts
from emulation.cluster.remote import DIE_WITH_PARENT, RemoteError, SshTarget, end_session
from emulation.errors import EmulationError
from safety import credentials, portguard, shield
from safety.privdir import PrivateDir
from safety.runstate import (
    RunManifest,
    acquire_fabric_lock,
    clean_leftovers,
    make_workdir,
    remove_workdir,
)

ANSWER = "MRCRUN"
START_TIMEOUT_S = 60.0  # a lock held by a run still stopping there is waited for
REQUEST_TIMEOUT_S = 30.0
MAX_LINE = 1 << 16


# ---- on the server ---------------------------------------------------------------------------

class _Hold:
    """What the run holds on this server, given back by release() whatever happened."""

    def __init__(self, ports: list[int], lock_timeout: float) -> None:
        self.rundir = PrivateDir()
        self.lock_fd: int | None = None
        self.manifest: RunManifest | None = None
        self.workdir: Path | None = None
        self.cuts: CableCuts | None = None
        try:  # what was taken before a failure is given back, as RunGuard does
            self.lock_fd = acquire_fabric_lock(lock_timeout, _log, self.rundir)
            clean_leftovers(_log, self.rundir)
            self.workdir = make_workdir(self)
            self.manifest = RunManifest(self.workdir, True, self.rundir)
            if ports:
                self.manifest.add_nft_table(shield.install(ports))
            self.cuts = CableCuts(self.manifest.add_nft_table)  # its table: swept with the rest
        except BaseException:
            self.release()
            raise

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.manifest is not None
        if "pids" in request:
            for pid in request["pids"]:
                self.manifest.add_pid(int(pid))
        elif "interfaces" in request:
            self.manifest.add_interfaces([str(n) for n in request["interfaces"]])
        elif "file" in request:
            name = str(request["file"])
            if name not in credentials.SERVER_FILES:
                raise ValueError(f"{name!r} is not one of the switches' key files")
            self.rundir.write_bytes(name, base64.b64decode(request["data"]))
        elif "cut" in request:
            assert self.cuts is not None
            dropped = self.cuts.set(int(v) for v in request["cut"])
            return {"ok": True, "dropped": {str(v): n for v, n in dropped.items()}}
        elif "vxlan_guard" in request:  # its table is in the manifest: swept at release
            spec = request["vxlan_guard"]
            return {"ok": True, "table": vxguard.install(
                [str(a) for a in spec["servers"]], [int(v) for v in spec["vnis"]],
                self.manifest.add_nft_table)}
        elif "port_guard" in request:
            return {"ok": True, "table": portguard.install(
                [str(n) for n in request["port_guard"]], self.manifest.add_nft_table)}
        else:
            raise ValueError(f"unknown request keys {sorted(request)}")
        return {"ok": True}

    def release(self) -> dict[str, Any]:
        swept: dict[str, Any] = {"processes": 0, "interfaces": 0}
        if self.manifest is not None:
            swept = self.manifest.sweep()
            self.manifest.remove()
            self.manifest = None
        if self.workdir is not None:
            remove_workdir(self.workdir)
            self.workdir = None
        for name in credentials.SERVER_FILES:
            self.rundir.unlink(name)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        self.rundir.close()
        return swept


def _log(text: str) -> None:
    with contextlib.suppress(OSError):
        print(text, flush=True)


def _answer(obj: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the first server may be gone: release anyway
        print(f"{ANSWER} {json.dumps(obj)}", flush=True)


class _Hangup(EmulationError):
    """SIGHUP or SIGTERM: the session is over; release."""


def _on_signal(_signum: int, _frame: object) -> None:
    raise _Hangup


def serve(ports: list[int], lock_timeout: float) -> int:
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    hold: _Hold | None = None
    try:
        hold = _Hold(ports, lock_timeout)
        _answer({"ready": True, "rundir": str(hold.rundir.path), "workdir": str(hold.workdir),
                 "pid": os.getpid()})
        for line in sys.stdin:
            request = json.loads(line)
            if request.get("release"):
                break
            try:
                _answer(hold.handle(request))
            except (ValueError, KeyError, TypeError, OSError, shield.ShieldError) as exc:
                _answer({"ok": False, "error": str(exc)})
    except _Hangup:
        pass
    except Exception as exc:  # noqa: BLE001 (told to the first server, then released)
        _answer({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        swept = hold.release() if hold is not None else {}
        _answer({"released": True, **swept})
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ports", default="", help="control ports to shield, comma-separated")
    p.add_argument("--lock-timeout", type=float, default=START_TIMEOUT_S)
    args = p.parse_args(argv)
    ports = [int(x) for x in args.ports.split(",") if x]
    return serve(ports, args.lock_timeout)


# ---- on the first server ---------------------------------------------------------------------

class ServerRun:
    """The first server's end of one server's `python -m emulation.cluster.serverrun` session."""

    def __init__(self, target: SshTarget, ports: Sequence[int], repo: Path,
                 python: str = sys.executable) -> None:
        self.target, self.ports, self.repo, self.python = target, sorted(ports), repo, python
        self.proc: subprocess.Popen | None = None
        self.rundir: Path | None = None
        self.workdir: Path | None = None
        self.log_lines: list[str] = []
        self.released: dict[str, Any] | None = None

    def launch(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the session (in the thread that lives as long as the run: the ssh client
        dies with the thread that started it, emulation.cluster.remote.DIE_WITH_PARENT)."""
        command = (f"cd {shlex.quote(str(self.repo))} && PYTHONPATH={shlex.quote(str(self.repo))} "
                   f"exec {shlex.quote(self.python)} -m emulation.cluster.serverrun "
                   f"--ports {','.join(map(str, self.ports))} --lock-timeout {timeout:g}")
        self.proc = subprocess.Popen([*DIE_WITH_PARENT, *self.target.argv("-T"), "--", command],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)

    def await_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the server is taken (any thread may wait)."""
        ready = self._read(timeout + REQUEST_TIMEOUT_S)
        if not ready.get("ready"):
            self.stop()
            raise RemoteError(f"{self.target.host}: the run could not take the server: "
                              f"{ready.get('error')}; {' | '.join(self.log_lines[-5:])}")
        self.rundir, self.workdir = Path(ready["rundir"]), Path(ready["workdir"])

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise RemoteError(f"{self.target.host}: serverrun did not answer in "
                                  f"{timeout:.0f} s ({' | '.join(self.log_lines[-5:])})")
            line = self.proc.stdout.readline(MAX_LINE).decode(errors="replace").strip()
            if not line:
                return {"error": "the session ended"}
            if line.startswith(ANSWER + " "):
                return json.loads(line[len(ANSWER) + 1:])
            self.log_lines.append(line)

    def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            raise RemoteError(f"{self.target.host}: serverrun is not running")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj).encode() + b"\n")
        self.proc.stdin.flush()
        answer = self._read(REQUEST_TIMEOUT_S)
        if not answer.get("ok"):
            raise RemoteError(f"{self.target.host}: serverrun refused {sorted(obj)}: "
                              f"{answer.get('error')}")
        return answer

    def add_pids(self, pids: Sequence[int]) -> None:
        if pids:
            self.request({"pids": list(pids)})

    def add_interfaces(self, names: Sequence[str]) -> None:
        if names:
            self.request({"interfaces": list(names)})

    def cut(self, vnis: Sequence[int]) -> dict[int, int]:
        """Cut exactly `vnis` on the server (emulation.cluster.cablecut.CableCuts.set)."""
        answer = self.request({"cut": sorted(vnis)})
        return {int(v): int(n) for v, n in answer["dropped"].items()}

    def guard_tunnels(self, servers: Sequence[str], vnis: Sequence[int]) -> str:
        """Let only `servers` (underlay addresses) reach the server's tunnel ends with `vnis`
        (emulation.cluster.vxguard); the table goes with the release. Returns its name."""
        answer = self.request({"vxlan_guard": {"servers": list(servers), "vnis": sorted(vnis)}})
        return str(answer["table"])

    def guard_ports(self, names: Sequence[str]) -> str:
        """Keep the server's root namespace off the switch ports `names`
        (safety.portguard); the table goes with the release. Returns its name."""
        return str(self.request({"port_guard": list(names)})["table"])

    def put_keys(self, directory: Path) -> None:
        """The switches' side of the run's keys, from this machine's run directory."""
        for name in credentials.SERVER_FILES:
            data = (directory / name).read_bytes()
            self.request({"file": name, "data": base64.b64encode(data).decode()})

    def fetch_logs(self, into: Path) -> None:
        """Copy the server's work directory (logs; not sockets) into `into`."""
        if self.workdir is None:
            return
        into.mkdir(mode=0o700, parents=True, exist_ok=True)
        pack = subprocess.Popen([*self.target.argv("-T"), "--",
                                 f"tar -C {shlex.quote(str(self.workdir))} -cf - "
                                 "--exclude='*.sock' ."], stdout=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        unpack = subprocess.run(["tar", "-C", str(into), "-xf", "-", "--no-same-owner"],
                                stdin=pack.stdout, capture_output=True, timeout=60)
        pack.wait(60)
        if unpack.returncode or pack.returncode:
            raise RemoteError(f"{self.target.host}: copying its logs failed: "
                              f"{unpack.stderr.decode(errors='replace').strip()}")

    def stop(self) -> dict[str, Any] | None:
        """Release the server (what serverrun swept), and end the session."""
        proc = self.proc
        if proc is None:
            return self.released
        try:
            if proc.poll() is None and proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.write(b'{"release": true}\n')
                    proc.stdin.close()
                while True:
                    answer = self._read(REQUEST_TIMEOUT_S)
                    if answer.get("released") or answer.get("error"):
                        self.released = answer
                        break
        except RemoteError as exc:
            self.released = {"error": str(exc)}
        finally:
            self.proc = None
            end_session(proc)
        return self.released


if __name__ == "__main__":
    raise SystemExit(main())
