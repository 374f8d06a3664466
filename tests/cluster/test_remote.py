"""emulation.cluster.remote between emulated servers, driven from inside server 0 as a cluster's
first server would: a process started on server 1 reports its PID there, is reachable through
a forwarded loopback port, stops by PID, and dies with the first server's process even when
that is SIGKILLed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cluster.servers import EmulatedServers
from tests.support import wait_until

pytestmark = pytest.mark.root
SERVERS = 2
REPO = Path(__file__).resolve().parents[2]
PORT = 47123

ECHO = """\
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(4)
while True:
    c, _ = s.accept()
    c.sendall(b"echo:" + c.recv(64))
    c.close()
"""

DRIVER = """\
import json, os, signal, socket, sys, time
from pathlib import Path
from emulation.cluster.remote import Forwarder, RemoteError, RemoteProcess, SshTarget
config, port, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
target = SshTarget("srv1", config=config)
echo = RemoteProcess(target, [sys.executable, "-c", sys.argv[4], str(port)])
pid = echo.start()
forward = Forwarder(target, [port])
forward.start()
reply = b""
for _ in range(100):  # the echo server may not listen yet
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"hi")
            reply = s.recv(64)
    except OSError:
        reply = b""
    if reply:
        break
    time.sleep(0.05)
out = {"pid": pid, "reply": reply.decode(), "alive": echo.alive()}
if mode == "stop":  # a second one, stopped the way switch processes are (procs.stop_process)
    from safety.procs import stop_process
    other = RemoteProcess(target, [sys.executable, "-c", sys.argv[4], str(port + 1)])
    out["other_pid"] = other.start()
    out["other_local_pid_is_ssh"] = open(f"/proc/{other.pid}/comm").read().strip()
    stop_process(other, 5)
    out["other_returncode"] = other.returncode
if mode == "stop":
    echo.stop()
    forward.stop()
    out["alive_after_stop"] = echo.alive()
    with socket.socket() as s:  # the forward's local end is closed with it
        out["port_open_after_stop"] = s.connect_ex(("127.0.0.1", port)) == 0
    occupied = socket.socket()
    occupied.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
    occupied.bind(("127.0.0.1", port))
    occupied.listen(1)
    try:  # a port someone else holds here is refused, not shared
        Forwarder(target, [port]).start(timeout=3)
        out["forward_over_taken_port"] = "started"
    except RemoteError as err:
        out["forward_over_taken_port"] = str(err)
    occupied.close()
print(json.dumps(out), flush=True)
if mode == "die":
    os.kill(os.getpid(), signal.SIGKILL)
"""




def drive(servers: EmulatedServers, mode: str) -> subprocess.CompletedProcess:
    return servers.run(0, ["env", f"PYTHONPATH={REPO}", str(REPO / ".venv/bin/python"), "-c",
                           DRIVER, str(servers.ssh_config_path), str(PORT), mode, ECHO],
                       capture_output=True, text=True, timeout=90)


def running_on(servers: EmulatedServers, i: int, pid: int) -> bool:
    return servers.run(i, ["kill", "-0", str(pid)], capture_output=True).returncode == 0


def test_a_remote_process_is_reached_through_a_forward_and_stopped_by_pid(
        servers: EmulatedServers) -> None:
    done = drive(servers, "stop")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["reply"] == "echo:hi" and out["alive"] is True
    assert out["alive_after_stop"] is False
    assert not running_on(servers, 1, out["pid"])
    assert out["port_open_after_stop"] is False
    assert out["other_local_pid_is_ssh"] == "ssh"  # this machine's PID is the ssh client's
    assert out["other_returncode"] is not None
    assert not running_on(servers, 1, out["other_pid"])
    assert "already in use here" in out["forward_over_taken_port"]


def test_a_killed_first_server_process_leaves_nothing_running_on_the_others(
        servers: EmulatedServers) -> None:
    done = drive(servers, "die")
    assert done.returncode == -9, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["reply"] == "echo:hi"
    wait_until(lambda: not running_on(servers, 1, out["pid"]),
               "the remote process to end after its starter was SIGKILLed", 10.0)
