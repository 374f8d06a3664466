"""Target selection, runtime CLI parsing, and the SoftSwitch Mininet node in a real network."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest
from p4runtime_sh.p4runtime import P4RuntimeClient

from fabric.options import bmv2_installed
from nodes import targets
from nodes.softswitch_node import SoftSwitch, softswitch_command
from p4rt import corpus
from p4rt.corpus import case_updates
from softswitch.__main__ import ConfigError, main, parse_interface, parse_loopback
from softswitch.cli import parse_command, request
from tests.switch.p4rt_support import CODEC, free_port, reset_pipeline, wait_listening


def test_auto_target_follows_bmv2_presence():
    want = "bmv2" if bmv2_installed() else "soft"  # fabric.options' one rule
    assert targets.resolve("auto") == want
    assert targets.switch_class("soft") is SoftSwitch
    with pytest.raises(targets.TargetError, match="choose one of"):
        targets.resolve("tofino")
    if shutil.which(targets.BMV2_BINARY) is None:
        with pytest.raises(targets.TargetError, match="simple_switch_grpc"):
            targets.resolve("bmv2")


def test_command_line_shape_and_validation():
    cmd = softswitch_command(4, {2: "s-eth2", 1: "s-eth1"}, 50004, 9094)
    assert cmd[cmd.index("--grpc-server-addr") + 1] == "127.0.0.1:50004"
    assert [cmd[i + 1] for i, w in enumerate(cmd) if w == "-i"] == ["1@s-eth1", "2@s-eth2"]
    with pytest.raises(ValueError, match="device_id"):
        softswitch_command(0, {}, 1, 1)
    assert parse_interface("3@p0l0-eth3") == (3, "p0l0-eth3")
    for bad in ("eth1", "x@eth1", "511@eth1"):
        with pytest.raises(ConfigError):
            parse_interface(bad)
    assert parse_loopback("localhost:1") == "localhost:1"
    with pytest.raises(ConfigError, match="loopback"):
        parse_loopback("0.0.0.0:50001")
    assert main(["--grpc-server-addr", "10.0.0.1:5"]) == 2


def test_runtime_cli_syntax():
    assert parse_command(["set_queue_rate", "1000", "3"]) == {
        "cmd": "set_queue_rate", "rate": 1000.0, "port": 3}
    assert parse_command(["set_queue_depth", "16", "2", "1"]) == {
        "cmd": "set_queue_depth", "depth": 16, "port": 2, "priority": 1}
    for bad in ([], ["set_queue_rate"], ["set_queue_depth", "x"], ["frobnicate"]):
        with pytest.raises(ValueError):
            parse_command(bad)


def test_process_rejects_non_loopback_grpc():
    r = subprocess.run([sys.executable, "-m", "softswitch", "--grpc-server-addr",
                        "192.0.2.1:50001"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "loopback" in r.stderr


CASES = corpus.load_cases() if corpus.CASES_PATH.exists() else []
CORPUS_MISSING = (f"the committed golden corpus {corpus.CASES_PATH} is missing or empty: restore "
                  "it from git or regenerate it with `.venv/bin/python -m tests.golden.generate`")


def golden_cases() -> list[corpus.Case]:
    """The committed golden corpus; a test that needs it fails, not skips, without it."""
    assert corpus.CASES_PATH.exists() and CASES, CORPUS_MISSING
    return CASES


SEND = ("import socket,sys;s=socket.socket(17,3);s.bind((sys.argv[1],0));"
        "s.send(bytes.fromhex(sys.argv[2]))")
RECV = ("import socket,sys;from rigs.vethlab import receive;"
        "s=socket.socket(17,3,socket.htons(3));s.bind((sys.argv[1],0));"
        "print('READY',flush=True);f=receive(s,5.0);print(f.hex() if f else 'NONE')")


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for Mininet")
def test_mininet_network_forwards_a_corpus_case():
    from mininet.net import Mininet

    case = next(c for c in golden_cases() if c.name == "usid_shift_t0_up")
    tag = os.getpid() % 10000
    net = Mininet(topo=None, controller=None, build=False, autoSetMacs=False)
    try:
        sw = net.addSwitch(f"ss{tag}", cls=SoftSwitch, device_id=1, grpc_port=free_port(),
                           thrift_port=free_port())
        hosts = [net.addHost(f"x{tag}h{p}") for p in range(1, 5)]
        for p, h in enumerate(hosts, start=1):
            net.addLink(h, sw, port2=p)
        net.build()
        sw.start([])
        for intf in sw.intfList():  # no kernel MLD/RS chatter reaches the hosts
            if intf.name != "lo":
                with open(f"/proc/sys/net/ipv6/conf/{intf.name}/disable_ipv6") as f:
                    assert f.read().strip() == "1", intf.name
        client = P4RuntimeClient(1, sw.grpc_address, (0, 1))
        try:
            reset_pipeline(client, 1, case_updates(CODEC, case))
        finally:
            client.tear_down()
        sw.set_queue_depth(32)
        sw.set_queue_rate(10000, port=3)
        out_host = hosts[case.outputs[0].port - 1]
        rx = out_host.popen([sys.executable, "-c", RECV, out_host.intfNames()[0]],
                            stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
        assert rx.stdout.readline().strip() == "READY"
        src = hosts[case.ingress_port - 1]
        src.cmd(sys.executable, "-c", f'"{SEND}"', src.intfNames()[0], case.frame.hex())
        got = rx.communicate(timeout=30)[0].strip()
        assert got == case.outputs[0].frame.hex()
        pid = sw.switch_pid
        sw.stop()
        assert sw.switch_pid is None and not os.path.exists(f"/proc/{pid}/status")
    finally:
        net.stop()


def test_control_request_error_is_typed():
    from softswitch.cli import ControlError

    with pytest.raises(ControlError):
        request(1, {"cmd": "queues"})


def test_sigterm_exits_cleanly_with_a_client_connected():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "softswitch", "--device-id", "2",
                             "--grpc-server-addr", f"127.0.0.1:{port}", "--no-p4"],
                            stderr=subprocess.PIPE, text=True)
    client = None
    try:
        wait_listening(port, proc)
        client = P4RuntimeClient(2, f"127.0.0.1:{port}", (0, 1))
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if client is not None:
            client.tear_down()


@pytest.mark.skipif(os.geteuid() != 0, reason="a raw socket needs root before the name matters")
def test_a_missing_interface_exits_with_a_message_naming_it(capsys):
    assert main(["-i", "1@nosuchif0", "--grpc-server-addr", f"127.0.0.1:{free_port()}"]) == 1
    assert "nosuchif0" in capsys.readouterr().err


def test_a_bad_p4info_exits_with_a_message(tmp_path, capsys):
    bad = tmp_path / "bad.txtpb"
    bad.write_text('tables { preamble { id: 1 name: "t" } }\n')
    assert main(["--p4info", str(bad), "--grpc-server-addr", f"127.0.0.1:{free_port()}"]) == 1
    assert "missing table IngressPipeImpl.my_usid_table" in capsys.readouterr().err


def test_process_reports_a_busy_grpc_port_clearly():
    """An outgoing connection holding the port (as an ephemeral port can) makes the bind fail:
    the switch says so and exits 1, no traceback."""
    with socket.create_server(("127.0.0.1", 0)) as srv, socket.socket() as client:
        client.bind(("127.0.0.1", 0))
        client.connect(srv.getsockname())
        busy = client.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "softswitch", "--grpc-server-addr",
                            f"127.0.0.1:{busy}", "--no-p4"], capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 1 and "is the port in use" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
