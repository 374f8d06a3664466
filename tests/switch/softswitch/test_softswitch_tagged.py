"""softswitch.tagged on a real veth: the kernel removes a received frame's outer VLAN tag
before any packet socket sees it, so the switch's main socket must not take tagged frames
and its tagged socket must give them back exactly as they were sent (as BMv2's libpcap
capture does), 802.1Q, 802.1ad and priority tags alike."""

from __future__ import annotations

import os
import select
import shutil
import socket

import pytest

from rigs.vethlab import VethLab
from softswitch import tagged

pytestmark = [pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2")]

MACS = bytes.fromhex("020000000001" "020000000002")
IPV6 = b"\x86\xdd" + bytes(range(60))
FRAMES = {
    "untagged": MACS + IPV6,
    "dot1q": MACS + b"\x81\x00\x20\x05" + IPV6,
    "priority_tag": MACS + b"\x81\x00\xa0\x00" + IPV6,  # VID 0, PCP 5
    "qinq": MACS + b"\x88\xa8\x00\x07\x81\x00\x00\x09" + IPV6,
    "ipv4_in_dot1q": MACS + b"\x81\x00\x00\x0a\x08\x00" + bytes(46),
    "dot1q_1518": MACS + b"\x81\x00\x00\x0b" + IPV6[:2] + bytes(1500),
}


def _read_all(sock: socket.socket, with_tags: bool) -> list[bytes]:
    out = []
    buf = bytearray(65535)
    while select.select([sock], [], [], 0.3)[0]:
        if with_tags:
            n, anc, _flags, _addr = sock.recvmsg_into([buf], tagged.ANC_SIZE)
            out.append(tagged.retag(memoryview(buf)[:n], anc))
        else:
            out.append(sock.recv(65535))
    return out


def test_tagged_frames_reach_the_tagged_socket_whole_and_only_it() -> None:
    with VethLab(f"tg{os.getpid() % 100000}", 1) as lab:
        ifname = lab.ports[1]
        main = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        tagged.attach_filter(main, tagged=False)
        main.bind((ifname, 0x0003))
        tags = tagged.tagged_socket(ifname, 0x0003)
        sender = lab.host_socket(1)
        try:
            for frame in FRAMES.values():
                sender.send(frame)
            untagged = _read_all(main, with_tags=False)
            restored = _read_all(tags, with_tags=True)
        finally:
            for s in (main, tags, sender):
                s.close()
    assert untagged == [FRAMES["untagged"]]
    assert restored == [f for name, f in FRAMES.items() if name != "untagged"]


def test_a_frame_without_auxiliary_data_is_left_as_it_is() -> None:
    assert tagged.retag(b"x" * 20, []) == b"x" * 20
