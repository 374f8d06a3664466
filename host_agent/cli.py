"""Command line for a running host agent: `python -m host_agent.cli --socket PATH COMMAND ...`.

Prints readable text by default and the agent's JSON response with --json. Exit status: 0 on
success, 1 when the agent refused the request or a verification failed, 2 when the agent could
not be reached.

`write` needs the peer's region: either pass --va/--rkey from the peer's `register`, or pass
--peer-socket so the CLI registers a region on the peer, writes, has the peer verify the bytes
against the same pattern seed, and deregisters the region again.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from host_agent.control import AgentUnreachable, ControlClient, ControlError
from host_agent.core import MrcHostError

WRITE_SLACK = 30.0  # seconds the CLI waits beyond the agent's own write timeout


def _int(text: str) -> int:
    return int(text, 0)  # accepts 0x... for va, rkey and EV values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m host_agent.cli", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", required=True, help="the agent's control socket")
    p.add_argument("--json", action="store_true", help="print the raw JSON response")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status", help="host, NICs, peers, regions")
    reg = sub.add_parser("register", help="register a memory region")
    reg.add_argument("size", type=_int, help="bytes")
    dereg = sub.add_parser("deregister", help="deregister a memory region")
    dereg.add_argument("rkey", type=_int, help="the region's rkey (register prints it)")
    w = sub.add_parser("write", help="RDMA-write a seeded pseudo-random pattern to a peer")
    w.add_argument("peer", type=int, help="peer host index")
    w.add_argument("bytes", type=_int, help="how many bytes to write")
    w.add_argument("--imm", type=_int, help="immediate data (32 bits)")
    w.add_argument("--seed", type=_int, default=0, help="pattern seed (default 0)")
    w.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    w.add_argument("--va", type=_int,
                   help="the peer region's address, from the peer's register (or --peer-socket)")
    w.add_argument("--rkey", type=_int,
                   help="the peer region's rkey, from the peer's register (or --peer-socket)")
    w.add_argument("--peer-socket", help="the peer agent's socket: register, write, verify")
    v = sub.add_parser("verify", help="check a region against a pattern seed")
    v.add_argument("rkey", type=_int, help="the region to check")
    v.add_argument("length", type=_int, help="bytes to check")
    v.add_argument("--seed", type=_int, default=0, help="pattern seed the writer used (default 0)")
    v.add_argument("--offset", type=_int, default=0,
                   help="first byte of the region to check (default 0)")
    s = sub.add_parser("stats", help="per-plane and per-EV counters")
    s.add_argument("--per-ev", action="store_true", help="every EV's state and counters")
    for name in ("events", "messages"):
        e = sub.add_parser(name, help=f"recent {name}")
        e.add_argument("--since", type=int, default=0, help="only those after this seq")
    for name, verb in (("deny", "set an EV DENIED"), ("allow", "clear DENIED on an EV")):
        d = sub.add_parser(name, help=verb)
        d.add_argument("peer", type=int, help="peer host index")
        d.add_argument("ev", type=_int, help="the EV (entropy value)")
    sub.add_parser("shutdown", help="stop the agent cleanly")
    return p


def write_via_peer(args: argparse.Namespace, client: ControlClient) -> dict[str, Any]:
    """register on the peer, write, verify on the peer, deregister: one combined result."""
    with ControlClient(args.peer_socket) as peer:
        region = peer.call("register", size=args.bytes)
        try:
            result = client.call("write", peer=args.peer, bytes=args.bytes, va=region["va"],
                                 rkey=region["rkey"], seed=args.seed, imm=args.imm,
                                 timeout=args.timeout)
            check = peer.call("verify", rkey=region["rkey"], length=args.bytes, seed=args.seed)
        finally:
            peer.call("deregister", rkey=region["rkey"])
    result["verified"] = check["match"]
    result["first_mismatch"] = check["first_mismatch"]
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    timeout = args.timeout + WRITE_SLACK if args.cmd == "write" else 60.0
    with ControlClient(args.socket, timeout=timeout) as client:
        if args.cmd == "write":
            if args.peer_socket:
                return write_via_peer(args, client)
            if args.va is None or args.rkey is None:
                raise ControlError("write: pass --va and --rkey from the peer's register, "
                                   "or --peer-socket")
            return client.call("write", peer=args.peer, bytes=args.bytes, va=args.va,
                               rkey=args.rkey, seed=args.seed, imm=args.imm,
                               timeout=args.timeout)
        fields = {k: v for k, v in vars(args).items()
                  if k not in ("socket", "json", "cmd", "per_ev") and v is not None}
        if args.cmd == "stats":
            fields["per_ev"] = args.per_ev
        return client.call(args.cmd, **fields)


def format_result(cmd: str, r: dict[str, Any]) -> str:
    if cmd == "stats":
        return format_stats(r)
    if cmd == "write":
        lines = [f"wrote {r['bytes']} bytes to host {r['peer']} in {r['duration_s']:.4f} s: "
                 f"{r['goodput_gbps'] * 1000:.1f} Mbit/s goodput",
                 f"  data packets {r['tx_data_packets']}, retransmits {r['retransmits']}, "
                 f"timeouts {r['timeouts']} ({r['spurious_timeouts']} spurious), "
                 f"NACKs {r['nacks_received']}"]
        if "verified" in r:
            lines.append("  receiver verified every byte" if r["verified"]
                         else f"  MISMATCH at byte {r['first_mismatch']}")
        return "\n".join(lines)
    if cmd == "verify":
        return (f"{r['length']} bytes match" if r["match"]
                else f"MISMATCH: first differing byte at offset {r['first_mismatch']}")
    if cmd in ("events", "messages"):
        rows = r[cmd]
        return "\n".join(
            f"{e['seq']:>7} {e['time']:.6f} {e['type']} "
            + " ".join(f"{k}={v}" for k, v in e.items() if k not in ("seq", "time", "type"))
            for e in rows) or f"no {cmd}"
    return "\n".join(f"{k}: {v}" for k, v in r.items() if k != "ok")


def format_stats(r: dict[str, Any]) -> str:
    ep = r["endpoint"]
    keys = ("tx_packets", "rx_packets", "tx_data_packets", "retransmits", "timeouts",
            "trims_received", "nacks_sent", "nacks_received", "sacks_received", "probes_sent",
            "ev_retired", "ev_reinstated", "ecn_marks_received", "malformed")
    lines = ["totals: " + ", ".join(f"{k}={ep[k]}" for k in keys),
             f"cpu_seconds: {r['cpu_seconds']:.3f}",
             "plane  up   tx_pkts   rx_pkts   tx_bytes  driver"]
    for plane, counts in ep["per_plane"].items():
        drv = r["driver"].get(str(plane), r["driver"].get(plane, {}))
        extra = " ".join(f"{k}={v}" for k, v in sorted(drv.items())
                         if k not in ("tx_frames", "rx_frames") and v)
        up = "yes" if r["planes_up"][int(plane)] else "NO"
        lines.append(f"{plane:>5}  {up:<3} {counts['tx_packets']:>9} {counts['rx_packets']:>9} "
                     f"{counts['tx_bytes']:>10}  {extra}")
    for peer, planes in r["peer_planes_up"].items():
        lines.append(f"peer {peer}: planes up {planes}")
    for qpn, by_plane in r["ev_states"].items():
        states = "; ".join(f"plane {p}: " + ", ".join(f"{s}={n}" for s, n in sorted(c.items()))
                           for p, c in sorted(by_plane.items()))
        lines.append(f"QP {qpn} EVs: {states}")
    for qpn, evs in r.get("per_ev", {}).items():
        lines.append(f"QP {qpn} per EV:")
        for ev, info in evs.items():
            lines.append(f"  ev {int(ev):#010x} " + " ".join(f"{k}={v}" for k, v in info.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = run(args)
    except AgentUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MrcHostError as exc:  # the agent's answer was an error, or none came
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else format_result(args.cmd, result))
    failed = result.get("match") is False or result.get("verified") is False
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
