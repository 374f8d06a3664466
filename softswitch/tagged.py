"""Frames that arrive with a VLAN tag, seen as BMv2 sees them.

Linux removes the outer 802.1Q or 802.1ad tag of every received frame before any packet
socket sees it (`skb_vlan_untag` in the receive path, on veths too) and keeps the tag beside
the frame. A plain `recv` on an AF_PACKET socket therefore returns the frame without its tag.
BMv2 reads its ports through libpcap, which puts the tag back from the socket's auxiliary
data, so its parser sees ethertype 0x8100 (or 0x88a8) and drops the frame as not IPv6,
where the software switch would have parsed the untagged inner frame and perhaps forwarded
it. To see what BMv2 sees without paying for ancillary data on every frame, a port has two
sockets, split by a socket filter on "the kernel removed a tag":
- the main socket takes untagged frames only, read with `recv_into` as before;
- the tagged socket takes tagged frames only, with PACKET_AUXDATA, and the reader puts the
  tag back (TPID from the auxiliary data when the kernel gives it, else 0x8100), as libpcap
  does. Measured on a veth: recvmsg_into with ancillary data costs 4.9 us a frame against
  1.7 us for recv_into, so only the rare tagged frame pays it.
Frames on the two sockets are not ordered against each other; BMv2's single capture is.
"""

from __future__ import annotations

import ctypes
import socket
import struct

SO_ATTACH_FILTER = 26
SOL_PACKET, PACKET_AUXDATA = 263, 8
SKF_AD_VLAN_TAG_PRESENT = 0xFFFFF000 + 48  # SKF_AD_OFF (-0x1000) + 48, as an unsigned k
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
ACCEPT, REJECT = 0x40000, 0  # bytes of the frame a filter keeps
TP_STATUS_VLAN_VALID, TP_STATUS_VLAN_TPID_VALID = 0x10, 0x40
ETH_P_8021Q = 0x8100
MAC_PAIR = 12  # the tag goes after the destination and source MACs
# struct tpacket_auxdata: status, len, snaplen (u32); mac, net, vlan_tci, vlan_tpid (u16)
_AUXDATA = struct.Struct("=IIIHHHH")
_TAG = struct.Struct("!HH")
ANC_SIZE = socket.CMSG_SPACE(_AUXDATA.size)


def _filter(tagged: bool) -> bytes:
    """A classic BPF program that keeps the frames whose tag was (tagged) or was not removed."""
    keep_if_none, keep_if_tag = (REJECT, ACCEPT) if tagged else (ACCEPT, REJECT)
    insns = [(BPF_LD_W_ABS, 0, 0, SKF_AD_VLAN_TAG_PRESENT),
             (BPF_JEQ_K, 0, 1, 0),  # no tag: the next instruction, else the one after
             (BPF_RET_K, 0, 0, keep_if_none),
             (BPF_RET_K, 0, 0, keep_if_tag)]
    return b"".join(struct.pack("=HBBI", *i) for i in insns)


def attach_filter(sock: socket.socket, tagged: bool) -> None:
    """Keep only tagged (or only untagged) frames on `sock`; the kernel copies the program."""
    program = ctypes.create_string_buffer(_filter(tagged))
    fprog = struct.pack("HL", len(program.raw) // 8, ctypes.addressof(program))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def tagged_socket(ifname: str, protocol: int) -> socket.socket:
    """The port's second socket: tagged frames only, with their tags beside them."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # nothing until bound
    try:
        attach_filter(s, tagged=True)
        s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        s.bind((ifname, protocol))
    except OSError:
        s.close()
        raise
    return s


def retag(frame: memoryview | bytes, ancdata: list) -> bytearray:
    """The frame with the tag the kernel removed put back (libpcap's rule), or as it is when
    the auxiliary data reports none; a new bytearray either way (the pipeline rewrites it)."""
    for level, kind, data in ancdata:
        if level != SOL_PACKET or kind != PACKET_AUXDATA or len(data) < _AUXDATA.size:
            continue
        status, _len, _snap, _mac, _net, tci, tpid = _AUXDATA.unpack_from(data)
        if not status & TP_STATUS_VLAN_VALID and not tci:
            return bytearray(frame)
        if not status & TP_STATUS_VLAN_TPID_VALID:
            tpid = ETH_P_8021Q
        out = bytearray(frame[:MAC_PAIR])
        out += _TAG.pack(tpid, tci)
        out += frame[MAC_PAIR:]
        return out
    return bytearray(frame)
