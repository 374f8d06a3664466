"""mrc_capture's checks (emulation.capture): bad requests are refused before tcpdump starts,
and the pcap is never written through a file or symlink someone else put there."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulation.capture import MAX_CAPTURE_S, check_request, local_end
from emulation.netconfig import NetworkError
from safety.privdir import open_new_file


def test_seconds_and_the_file_are_checked_first(tmp_path: Path) -> None:
    new = tmp_path / "link.pcap"
    check_request(1.0, new)
    for seconds in (0.0, -1.0, MAX_CAPTURE_S + 1):
        with pytest.raises(NetworkError, match="SECONDS"):
            check_request(seconds, new)
    new.write_bytes(b"")
    with pytest.raises(NetworkError, match="exists"):
        check_request(1.0, new)
    with pytest.raises(NetworkError, match="not a directory"):
        check_request(1.0, tmp_path / "nowhere" / "link.pcap")


def test_the_copy_refuses_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    planted = tmp_path / "out.pcap"
    planted.symlink_to(victim)
    with pytest.raises(OSError), open_new_file(planted) as out:
        out.write(b"pcap bytes")
    assert victim.read_bytes() == b"keep me"
    with pytest.raises(NetworkError, match="exists"):
        check_request(1.0, planted)
    fresh = tmp_path / "fresh.pcap"
    with open_new_file(fresh) as out:
        out.write(b"pcap bytes")
    assert fresh.read_bytes() == b"pcap bytes"


class _Node:
    def __init__(self, name: str) -> None:
        self.name = name


class _Intf:
    def __init__(self, node: _Node) -> None:
        self.node = node


class _Link:
    def __init__(self, a: _Node, b: _Node) -> None:
        self.intf1, self.intf2 = _Intf(a), _Intf(b)


def test_the_end_on_this_server_is_captured() -> None:
    link = _Link(_Node("p0l0"), _Node("p0s0"))
    here = {"p0s0"}.__contains__
    assert local_end(link, here).node.name == "p0s0"
    with pytest.raises(NetworkError, match="other servers"):
        local_end(_Link(_Node("p0l0"), _Node("p0s1")), here)
