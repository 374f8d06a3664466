"""A host NIC sends at the port rate, as a real NIC serializes at its line rate.

Without it a host's veth takes a whole congestion window at once, and the first switch meets
the burst: BMv2's trim decision reads the depth the last departing packet left (a lagging
view), so a burst could overflow its queue and tail-drop on a healthy route (docs/benchmarks.md,
"BMv2 jitter"). The NIC is modelled like a switch port (emulation.netconfig,
CONTROL_RATE_FACTOR): an HTB with two classes, each at its own rate counted in bytes, neither
borrowing from the other. Data frames get port_rate_pps full data frames per second; control
frames (DSCP_CONTROL: SACKs, NACKs, probes) get CONTROL_RATE_FACTOR times that, so they leave
at once and do not eat the data rate. On a real link a header-only ACK costs its bytes, but at
this MTU a SACK is 13% of a data frame (under 2% with a 4 KiB MTU and a 64-byte ACK): charged
to the data rate, a host that sends and receives at once lost 12% of its NIC (permutation
aggregate 0.88, 2026-11-27). HTB and u32 because this kernel has neither prio nor flower.

The socket's send buffer, not this queue, is what fills under a burst: frames in the qdisc
stay charged to the sending socket, so the agent's non-blocking send backs off (EAGAIN) long
before the class queues' packet limit could drop anything.
"""

from __future__ import annotations

from wire.layout import DSCP_CONTROL, FULL_DATA_FRAME_LEN

# Rates are in packets/s, but the high-priority queue carries header-only frames (a trimmed
# packet is 134 bytes, a SACK about 150, a full data frame 1158): on a byte-rate link each takes
# about 1/8 of a data packet's time, so that queue is paced 8 times faster, on the switch ports
# (emulation.network) and on the host NICs (here). At the data rate, incast trims would
# overflow it and turn into drops and timeouts that a real link would not see.
CONTROL_RATE_FACTOR = 8

BURST_FRAMES = 2  # bucket depth: a NIC sends back to back, never a window at once
CLASS_LIMIT = 1000  # packets per class queue (a veth's default tx queue length)
# The IPv6 header's first 16 bits hold version(4) | traffic class(8) | flow label(4); the DSCP
# is the traffic class's upper 6 bits.
_DSCP_SHIFT = 4 + 2
_DSCP_MASK = 0x3F << _DSCP_SHIFT
CONTROL_CLASS, DATA_CLASS = "1:10", "1:20"


def pacing_cmds(ifname: str, port_rate_pps: int, leaf: str | None = None) -> list[str]:
    """tc commands that pace one NIC at `port_rate_pps` full data frames per second; `leaf`:
    the class queues' qdisc instead of a FIFO (the link delay on BMv2, emulation.linkdelay)."""
    if port_rate_pps < 1:
        raise ValueError(f"NIC rate must be at least 1 packet/s, got {port_rate_pps}")
    data_bps = port_rate_pps * FULL_DATA_FRAME_LEN * 8
    bucket = BURST_FRAMES * FULL_DATA_FRAME_LEN
    classes = [(CONTROL_CLASS, data_bps * CONTROL_RATE_FACTOR, 0), (DATA_CLASS, data_bps, 1)]
    return [
        f"tc qdisc replace dev {ifname} root handle 1: htb default {DATA_CLASS[2:]}",
        *(f"tc class replace dev {ifname} parent 1: classid {cls} htb rate {bps}bit "
          f"ceil {bps}bit burst {bucket} cburst {bucket} prio {prio} "
          f"quantum {FULL_DATA_FRAME_LEN}" for cls, bps, prio in classes),
        *(f"tc qdisc replace dev {ifname} parent {cls} {leaf or f'pfifo limit {CLASS_LIMIT}'}"
          for cls, _, _ in classes),
        f"tc filter replace dev {ifname} parent 1: protocol ipv6 prio 1 u32 "
        f"match u16 {DSCP_CONTROL << _DSCP_SHIFT:#06x} {_DSCP_MASK:#06x} at 0 "
        f"flowid {CONTROL_CLASS}",
    ]
