"""A host NIC sends at the port rate, as a real NIC serializes at its line rate.

Without it a host's veth takes a whole congestion window at once, and the first switch meets
the burst: BMv2's trim decision reads the depth the last departing packet left (a lagging
view), so a burst could overflow its queue and tail-drop on a healthy route (docs/benchmarks.md,
"BMv2 jitter"). The NIC's qdisc is an HTB of port_rate_pps full data frames per second, in
bytes (a header-only control frame costs its size, as on a wire), with two classes: control
frames (DSCP_CONTROL: SACKs, NACKs, probes) served first, as RDMA NICs send ACKs ahead of data,
and everything else. HTB and u32 because this kernel has neither prio nor flower.

The socket's send buffer, not this queue, is what fills under a burst: frames in the qdisc
stay charged to the sending socket, so the agent's non-blocking send backs off (EAGAIN) long
before the class queues' packet limit could drop anything.
"""

from __future__ import annotations

from wire.layout import DSCP_CONTROL, FULL_DATA_FRAME_LEN

BURST_FRAMES = 2  # bucket depth: a NIC sends back to back, never a window at once
CLASS_LIMIT = 1000  # packets per class queue (a veth's default tx queue length)
# The IPv6 header's first 16 bits hold version(4) | traffic class(8) | flow label(4); the DSCP
# is the traffic class's upper 6 bits.
_DSCP_SHIFT = 4 + 2
_DSCP_MASK = 0x3F << _DSCP_SHIFT
CONTROL_CLASS, DATA_CLASS = "1:10", "1:20"


def pacing_cmds(ifname: str, port_rate_pps: int) -> list[str]:
    """tc commands that pace one NIC at `port_rate_pps` full data frames per second."""
    if port_rate_pps < 1:
        raise ValueError(f"NIC rate must be at least 1 packet/s, got {port_rate_pps}")
    rate = f"{port_rate_pps * FULL_DATA_FRAME_LEN * 8}bit"
    bucket = BURST_FRAMES * FULL_DATA_FRAME_LEN
    burst = f"burst {bucket} cburst {bucket}"
    # Control is guaranteed the whole rate and data only borrows: strict priority in HTB.
    classes = [(CONTROL_CLASS, rate, 0), (DATA_CLASS, "8bit", 1)]
    return [
        f"tc qdisc replace dev {ifname} root handle 1: htb default {DATA_CLASS[2:]}",
        f"tc class replace dev {ifname} parent 1: classid 1:1 htb rate {rate} ceil {rate} "
        f"{burst}",
        *(f"tc class replace dev {ifname} parent 1:1 classid {cls} htb rate {r} ceil {rate} "
          f"{burst} prio {prio} quantum {FULL_DATA_FRAME_LEN}" for cls, r, prio in classes),
        *(f"tc qdisc replace dev {ifname} parent {cls} pfifo limit {CLASS_LIMIT}"
          for cls, _, _ in classes),
        f"tc filter replace dev {ifname} parent 1: protocol ipv6 prio 1 u32 "
        f"match u16 {DSCP_CONTROL << _DSCP_SHIFT:#06x} {_DSCP_MASK:#06x} at 0 "
        f"flowid {CONTROL_CLASS}",
    ]
