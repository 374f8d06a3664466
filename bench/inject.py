"""Mutated MRC frames onto one interface, for the soak (bench/costs/soak.py).

    python -m bench.inject --ifname IF --count N --seed S --src H --dst H --plane P

Every frame starts as a valid MRC data frame from host `src` to host `dst` on `plane` (right
MACs, addresses, uSID route, QPN convention, a random PSN and rkey), then gets one mutation:
a few flipped bytes, a truncation, an extension with junk, a random header field, or pure
random bytes. Run it in the namespace that owns IF (Mininet: host.popen). Prints one JSON line:
frames sent and send errors.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys

import wire
from fabric.options import add_fabric_args, fabric_from_args
from fabric.topology import Fabric
from host_agent.hostconfig import qpn_for
from wire.layout import ETH_LEN, ETH_TYPE

MUTATIONS = ("flip", "truncate", "extend", "field", "random")


def base_frame(fabric: Fabric, src: int, dst: int, plane: int, rng: random.Random,
               qpn: int | None = None) -> bytes:
    """A data frame src -> dst to `qpn` (dst's QP for src; default: the 0x100 + src convention)."""
    path = fabric.paths(src, dst, plane)[0]
    src_nic, dst_nic = fabric.nic(src, plane), fabric.nic(dst, plane)
    t0 = fabric.t0(plane, src_nic.t0)
    payload = rng.randbytes(rng.randrange(0, 1025))
    pkt = wire.DataPacket(
        bth=wire.Bth(opcode=wire.OP_WRITE_ONLY, dest_qp=qpn_for(src) if qpn is None else qpn,
                     psn=rng.randrange(1 << 24), ack_req=True),
        meth=wire.Meth(msn=rng.randrange(1 << 16)),
        reth=wire.Reth(va=rng.getrandbits(48), rkey=rng.getrandbits(32), dma_len=len(payload)),
        payload=payload)
    env = wire.Envelope(src_nic.mac, t0.mac, src_nic.address, path.address, src_nic.address,
                        dst_nic.address, rng.getrandbits(32), wire.DSCP_TRIMMABLE, wire.ECN_ECT0)
    return wire.encode_frame(env, wire.encode_packet(pkt))


def mutate(frame: bytes, rng: random.Random) -> bytes:
    kind = rng.choice(MUTATIONS)
    out = bytearray(frame)
    if kind == "flip":
        for _ in range(rng.randrange(1, 5)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del out[rng.randrange(ETH_LEN, len(out)):]
    elif kind == "extend":
        out += rng.randbytes(rng.randrange(1, 200))
    elif kind == "field":
        at = rng.randrange(ETH_LEN, min(len(out), wire.FRAME_HEADERS_LEN + 48))
        out[at:at + 4] = rng.randbytes(4)
    else:
        out = bytearray(frame[:ETH_TYPE] + rng.randbytes(rng.randrange(2, 1500)))  # MACs kept
    return bytes(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ifname", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--src", type=int, required=True)
    p.add_argument("--dst", type=int, required=True)
    p.add_argument("--plane", type=int, default=0)
    p.add_argument("--qpn", type=lambda v: int(v, 0), default=None,
                   help="dst's QPN for src (an exchanged one); default 0x100 + src")
    add_fabric_args(p)
    args = p.parse_args(argv)
    fabric = fabric_from_args(args)
    rng = random.Random(args.seed)
    sent = errors = 0
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((args.ifname, 0))
        for _ in range(args.count):
            frame = mutate(base_frame(fabric, args.src, args.dst, args.plane, rng, args.qpn), rng)
            try:
                sock.send(frame)
                sent += 1
            except OSError:  # e.g. a frame shorter than Ethernet's header: counted, not fatal
                errors += 1
    print(json.dumps({"sent": sent, "send_errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
