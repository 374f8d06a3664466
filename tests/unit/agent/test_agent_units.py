"""Host agent pieces that need no root: netlink parsing, host config, control protocol, commands."""

from __future__ import annotations

import json
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from fabric import hostpaths
from fabric.topology import Fabric
from host_agent import cli
from host_agent.agent import Agent
from host_agent.commands import pattern
from host_agent.control import (
    MAX_LINE,
    AgentUnreachable,
    ControlClient,
    ControlError,
    ControlServer,
    RequestError,
)
from host_agent.core import EndpointConfig, EvState, LocalProtocolError
from host_agent.hostconfig import HostConfig, HostConfigError, qpn_for
from host_agent.loop import EventLoop
from host_agent.nic import IFF_RUNNING, IFF_UP, RTM_DELLINK, RTM_NEWLINK, parse_link_messages

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)


def link_msg(msg_type: int, index: int, flags: int, attrs: bytes = b"") -> bytes:
    body = struct.pack("=BxHiII", 0, 1, index, flags, 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), msg_type, 0, 0, 0) + body


def test_netlink_link_messages_give_index_and_state() -> None:
    data = (link_msg(RTM_NEWLINK, 3, IFF_UP | IFF_RUNNING, b"\x08\x00\x03\x00abc\x00")
            + link_msg(RTM_NEWLINK, 4, IFF_UP)  # admin up, no carrier
            + link_msg(RTM_DELLINK, 5, IFF_UP | IFF_RUNNING)
            + link_msg(20, 6, IFF_UP | IFF_RUNNING))  # RTM_NEWADDR: not a link message
    assert parse_link_messages(data) == [(3, True), (4, False), (5, False)]
    assert parse_link_messages(data[:-3]) == [(3, True), (4, False), (5, False)]  # cut tail
    assert parse_link_messages(struct.pack("=IHHII", 4, RTM_NEWLINK, 0, 0, 0)) == []


def test_host_config_from_the_exported_path_set() -> None:
    exported = json.dumps(hostpaths.export(FABRIC))
    fabric, paths = hostpaths.load(exported)
    config = HostConfig.from_paths(1, fabric.planes, paths)
    assert [n.ifname for n in config.nics] == ["h1-eth0", "h1-eth1"]
    assert config.nics[1].next_hop_mac == FABRIC.t0(1, FABRIC.nic(1, 1).t0).mac
    assert config.nics[0].address == FABRIC.nic(1, 0).address
    assert sorted(config.paths) == [0]
    assert len(config.paths[0]) == 4  # 2 planes x 2 spines
    assert config.peer_of()[FABRIC.nic(0, 1).address] == 0
    with pytest.raises(HostConfigError, match="planes \\[1\\]"):
        HostConfig.from_paths(1, 2, [p for p in paths if p.plane == 0])


def test_qpn_convention_matches_between_peers() -> None:
    assert qpn_for(3) == 0x103 and qpn_for(0) == 0x100


class Idle:
    """A deadline source with nothing to do: the loop serves only its sockets and timers."""

    def deadline(self) -> None:
        return None

    def on_deadline(self, now: float) -> None:
        raise AssertionError("no deadline was set")

    def after_wakeup(self) -> None:
        pass


@pytest.fixture
def loop_server(tmp_path: Path):
    """An agent's event loop (no NICs) serving a ControlServer from a thread."""
    loop = EventLoop()
    path = str(tmp_path / "ctl.sock")

    def handler(request: dict[str, Any], reply: Any) -> None:
        cmd = request["cmd"]
        if cmd == "echo":
            reply({"ok": True, "args": request.get("args")})
        elif cmd == "later":
            loop.call_at(loop.clock() + 0.05, lambda: reply({"ok": True, "late": True}))
        elif cmd == "bad":
            raise RequestError("bad: nope")
        elif cmd == "boom":
            raise RuntimeError("handler bug")
        elif cmd == "stop":
            reply({"ok": True})
            loop.stop()

    server = ControlServer(path, loop, handler)
    thread = threading.Thread(target=loop.run, args=(Idle(),), daemon=True)
    thread.start()
    try:
        yield path
    finally:
        if thread.is_alive():
            with ControlClient(path) as c:
                c.call("stop")
        thread.join(5)
        server.close()
        loop.close()
    assert not Path(path).exists()


def test_control_protocol_round_trips(loop_server: str) -> None:
    with ControlClient(loop_server, timeout=5) as c:
        assert c.call("echo", args=[1, 2]) == {"ok": True, "args": [1, 2]}
        assert c.call("later") == {"ok": True, "late": True}
        with pytest.raises(ControlError, match="nope"):
            c.call("bad")
        with pytest.raises(ControlError, match="internal error: RuntimeError"):
            c.call("boom")
        assert c.call("echo", args="still alive")["args"] == "still alive"


def test_control_client_pipelines_requests(loop_server: str) -> None:
    """Answers come back in completion order and are matched to their requests by id; a call()
    made while pipelined answers are outstanding keeps them for next_reply()."""
    with ControlClient(loop_server, timeout=5) as c:
        late = c.submit("later")
        bad = c.submit("bad")
        echo = c.submit("echo", args="first")
        first, second = c.next_reply(), c.next_reply()
        assert first == (bad, {"ok": False, "error": "bad: nope"})
        assert second == (echo, {"ok": True, "args": "first"})
        again = c.submit("later")
        assert c.call("echo", args="between")["args"] == "between"
        assert sorted([c.next_reply(), c.next_reply()]) == [
            (late, {"ok": True, "late": True}), (again, {"ok": True, "late": True})]
        with pytest.raises(ControlError, match="no request is waiting"):
            c.next_reply()


def test_control_rejects_garbage_lines(loop_server: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(loop_server)
        s.sendall(b"not json\n[1]\n{\"cmd\": 3}\n")
        lines = b""
        while lines.count(b"\n") < 3:
            lines += s.recv(4096)
        responses = [json.loads(line) for line in lines.splitlines()]
        assert [r["ok"] for r in responses] == [False, False, False]
        s.sendall(b"x" * (MAX_LINE + 10))  # no newline: dropped, not buffered forever
        assert s.recv(10) == b""
    with ControlClient(loop_server, timeout=5) as c:
        assert c.call("echo")["ok"]


def test_control_socket_path_rules(tmp_path: Path, loop_server: str) -> None:
    with pytest.raises(ControlError, match="already listening"):
        ControlServer(loop_server, None, lambda r, reply: None)  # type: ignore[arg-type]
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))  # bound, never listening: what a crashed agent leaves
    plain = tmp_path / "plain"
    plain.write_text("x")
    with pytest.raises(ControlError, match="not a socket"):
        ControlServer(str(plain), None, lambda r, reply: None)  # type: ignore[arg-type]
    with pytest.raises(AgentUnreachable):
        ControlClient(str(stale))
    loop = EventLoop()
    server = ControlServer(str(stale), loop, lambda r, reply: None)
    server.close()
    loop.close()
    assert not stale.exists()


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    config = HostConfig.from_paths(0, 2, hostpaths.all_host_paths(FABRIC, 0))
    return Agent(config, EndpointConfig(), str(tmp_path / "a.sock"), seed=0)


def call(agent: Agent, cmd: str, **args: Any) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    agent.commands.handle({"cmd": cmd, **args}, out.append)
    assert len(out) == 1
    return json.loads(json.dumps(out[0], default=str))  # what a client would see


def test_commands_register_verify_and_validate(agent: Agent) -> None:
    region = call(agent, "register", size=5000)
    assert region["length"] == 5000
    assert call(agent, "verify", rkey=region["rkey"], length=5000, seed=1)["match"] is False
    buf = agent.commands.regions[region["rkey"]].buffer
    buf[100:1100] = pattern(4, 1000)
    assert call(agent, "verify", rkey=region["rkey"], offset=100, length=1000, seed=4) == {
        "ok": True, "match": True, "first_mismatch": None, "length": 1000}
    buf[600] ^= 0xFF
    assert call(agent, "verify", rkey=region["rkey"], offset=100, length=1000,
                seed=4)["first_mismatch"] == 600
    for bad in ({"size": 0}, {"size": "12"}, {"size": True}, {}):
        with pytest.raises(RequestError):
            call(agent, "register", **bad)
    with pytest.raises(RequestError, match="exceeds"):
        call(agent, "verify", rkey=region["rkey"], offset=4000, length=2000)
    with pytest.raises(RequestError, match="unknown command"):
        call(agent, "frobnicate")
    with pytest.raises(RequestError, match="no paths to host 0"):
        call(agent, "deny", peer=0, ev=1)


def test_deny_allow_and_stats(agent: Agent) -> None:
    qpn = agent.driver.ensure_connected(1)[0]
    ev = next(iter(agent.endpoint.ev_states(qpn)))
    assert call(agent, "deny", peer=1, ev=ev)["state"] == "DENIED"
    assert agent.endpoint.ev_states(qpn)[ev] is EvState.DENIED
    with pytest.raises(RequestError, match="deny"):
        call(agent, "deny", peer=1, ev=ev)  # DENIED -> deny is not a transition
    assert call(agent, "allow", peer=1, ev=ev)["state"] == "GOOD"
    stats = call(agent, "stats", per_ev=True)
    assert stats["ev_states"]["0x101"]["0"]["GOOD"] > 0
    assert str(ev) in stats["per_ev"]["0x101"]
    assert stats["per_ev"]["0x101"][str(ev)]["route"].startswith("fcbb:")  # its source route
    counters = call(agent, "counters")
    assert counters["counters"]["rx_data_bytes"] == 0 and counters["time"] > 0
    assert "per_ev" not in counters["counters"]
    view = call(agent, "view", peer=1, paths=True)  # the run view's sample: the same facts
    assert view["qpn"] == qpn and set(view["evs"]) == set(stats["per_ev"]["0x101"])
    for ev_id, (state, tx, plane, route) in view["evs"].items():
        full = stats["per_ev"]["0x101"][ev_id]
        assert [state, tx, plane, route] == [full["state"], full["tx_packets"], full["plane"],
                                             full["route"]]
    assert len(call(agent, "view", peer=1)["evs"][str(ev)]) == 2  # without paths
    assert call(agent, "view", peer=2) == {"ok": True, "counters": view["counters"],
                                           "qpn": None, "evs": {}}  # no QP: none opened
    assert 2 not in agent.driver.connected
    agent.driver.pump()  # the loop does this after every command: events reach the history
    events = call(agent, "events")["events"]
    assert [e["new"] for e in events if e["type"] == "EvStateChanged"] == ["DENIED", "GOOD"]
    text = cli.format_result("stats", stats)
    assert "QP 0x101 EVs: plane 0: GOOD=" in text and "per EV" in text


def test_cli_parser_and_formatting() -> None:
    args = cli.build_parser().parse_args(
        ["--socket", "/x", "write", "2", "0x100", "--imm", "7", "--peer-socket", "/y"])
    assert (args.peer, args.bytes, args.imm, args.peer_socket) == (2, 256, 7, "/y")
    text = cli.format_result("write", {"bytes": 10, "peer": 2, "duration_s": 0.5,
                                       "goodput_gbps": 1.6e-7, "tx_data_packets": 1,
                                       "retransmits": 0, "timeouts": 2, "spurious_timeouts": 1,
                                       "nacks_received": 0,
                                       "verified": False, "first_mismatch": 3})
    assert "MISMATCH at byte 3" in text and "timeouts 2 (1 spurious)" in text
    assert cli.main(["--socket", "/nonexistent/agent.sock", "status"]) == 2


@pytest.fixture
def exchanging(tmp_path: Path) -> tuple[Agent, Agent]:
    """Two agents (h0, h1) in --exchange-qps mode, never started: commands only."""
    fabric = Fabric(2, 1, 1, 2)
    return tuple(Agent(HostConfig.from_fabric(fabric, h), EndpointConfig(),  # type: ignore
                       str(tmp_path / f"h{h}.sock"), seed=None, exchange=True)
                 for h in (0, 1))


def test_qps_are_exchanged_out_of_band_with_secret_qpns_and_psns(exchanging) -> None:
    a, b = exchanging
    offer_a, offer_b = call(a, "qp_info", peer=1), call(b, "qp_info", peer=0)
    assert call(a, "qp_info", peer=1) == offer_a  # kept until qp_connect uses it
    for offer in (offer_a, offer_b):
        assert 0x100 <= offer["qpn"] < 1 << 24 and 0 <= offer["psn"] < 1 << 24
    assert (offer_a["qpn"], offer_b["qpn"]) != (qpn_for(1), qpn_for(0))  # not the convention
    # a write before the exchange is refused: no QP opens by convention
    with pytest.raises(RequestError, match="0 of 1 QPs to h1 open"):
        call(a, "write", peer=1, bytes=10, va=0, rkey=1)
    call(a, "qp_connect", peer=1, qpn=offer_b["qpn"], psn=offer_b["psn"])
    call(b, "qp_connect", peer=0, qpn=offer_a["qpn"], psn=offer_a["psn"])
    conn = a.endpoint.connection(offer_a["qpn"])
    assert (conn.remote_qpn, conn.sender.next_psn) == (offer_b["qpn"], offer_a["psn"])
    assert call(a, "status")["qps"] == {"1": [offer_a["qpn"]]}
    with pytest.raises(RequestError, match="call it first"):  # each offer is used once
        call(a, "qp_connect", peer=1, qpn=offer_b["qpn"], psn=offer_b["psn"])
    with pytest.raises(RequestError, match="not a peer"):
        call(a, "qp_info", peer=7)
    # a re-exchange (the peer restarted) replaces the QP with fresh values
    again = call(a, "qp_info", peer=1)
    assert again["qpn"] != offer_a["qpn"]
    call(a, "qp_connect", peer=1, qpn=0x4242, psn=5)
    assert call(a, "status")["qps"] == {"1": [again["qpn"]]}
    with pytest.raises(LocalProtocolError):
        a.endpoint.connection(offer_a["qpn"])  # the old QP is gone
