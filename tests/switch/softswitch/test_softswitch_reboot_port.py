"""A software switch's runtime-control port is never free while the switch crashes and
reboots inside its process (detach, attach), so no other local user can listen on it and
take the controller's requests. Before (issue 54), detach closed the control listener with
the switch's packet sockets (about 12 ms each) and the fresh switch bound it again: an
unprivileged listener got the port in between, and the switch process then died on its bind.

The unprivileged user (nobody, through setpriv) tries to bind and listen on the port in a
tight loop the whole time; the test passes only if not one attempt succeeded."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nodes.softswitch_node import softswitch_command
from rigs.vethlab import VethLab
from safety.procs import stop_process
from softswitch.cli import ControlError, request
from tests.support import wait_until
from tests.switch.p4rt_support import free_port, wait_listening

REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534
CYCLES = 5
# Binds as an attacker would (SO_REUSEADDR: a closed port's TIME_WAIT does not stop it);
# says "ready" once the loop runs, "bound" (and stops) if the port was ever free.
SQUATTER = """
import socket, sys
port = int(sys.argv[1])
print("ready", flush=True)
while True:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
    except OSError:
        s.close()
        continue
    print("bound", flush=True)
    s.close()
    break
"""
pytestmark = [pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "setpriv")),
    reason="needs root, iproute2 and setpriv")]


def wait_down(port: int, down: bool) -> None:
    def answered() -> bool:
        try:
            return request(port, {"cmd": "stats"})["down"] == down
        except ControlError:  # the old code's window: the port closed (or someone else's)
            return False
    wait_until(answered, f"the switch to be {'down' if down else 'up'}", 10.0)


def cycle(port: int) -> None:
    """One crash and reboot of the switch, each waited for."""
    assert request(port, {"cmd": "detach"}) == {"ok": True}
    wait_down(port, True)
    assert request(port, {"cmd": "attach"}) == {"ok": True}
    wait_down(port, False)


def test_the_control_port_is_never_free_across_detach_and_attach(tmp_path: Path) -> None:
    grpc_port, control_port = free_port(), free_port()
    log = tmp_path / "softswitch.log"
    with VethLab(f"rp{os.getpid() % 100000}", 4) as lab, log.open("w") as out:
        proc = subprocess.Popen(softswitch_command(1, lab.ports, grpc_port, control_port),
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        squatter: subprocess.Popen | None = None
        said = ""
        try:
            wait_listening(grpc_port, proc)
            squatter = subprocess.Popen(
                ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 "/usr/bin/python3", "-c", SQUATTER, str(control_port)],
                stdout=subprocess.PIPE, text=True)
            assert squatter.stdout is not None
            assert squatter.stdout.readline().strip() == "ready"
            failure: BaseException | None = None
            try:
                for _ in range(CYCLES):
                    cycle(control_port)
            except BaseException as exc:  # noqa: BLE001 (reported after the squatter's word)
                failure = exc
        finally:
            if squatter is not None:
                squatter.kill()  # by its PID (setpriv exec'd python3 in place)
                said = squatter.communicate(timeout=10)[0]
            stop_process(proc, 10)
    assert "bound" not in said, "an unprivileged user bound the switch's control port " \
                                "during a detach/attach cycle"
    if failure is not None:
        raise AssertionError(f"{failure}\nswitch log:\n{log.read_text()[-2000:]}") from failure
