"""The shape of each entry the MRC program's tables take, as p4rt.entities.

One place knows which match fields and action parameters each table of p4src/ has: the
controller builds its static tables from these, the tests and the benchmark program single
switches with them, and p4rt.codec turns them into P4Runtime messages.
"""

from __future__ import annotations

from p4rt import names as N
from p4rt.entities import Action, Exact, Group, Lpm, Member, RegisterCell, TableEntry


def mac_int(mac: str) -> int:
    """A MAC address string as the 48-bit integer P4 parameters carry."""
    return int(mac.replace(":", ""), 16)


def next_hop(port: int, dmac: int) -> Action:
    return Action(N.SET_NEXT_HOP, ((N.PARAM_PORT, port), (N.PARAM_DMAC, dmac)))


def my_usid(prefix: int) -> TableEntry:
    """my_usid_table: frames whose DA starts with `prefix` (block + this switch's uSID)
    get the uSID shift."""
    return TableEntry(N.MY_USID_TABLE, ((N.USID_PREFIX, Exact(prefix)),), Action(N.SHIFT_USID))


def usid_fwd(prefix: int, port: int, dmac: int) -> TableEntry:
    """usid_fwd_table: after the shift, a DA starting with `prefix` leaves on `port`."""
    return TableEntry(N.USID_FWD_TABLE, ((N.USID_PREFIX, Exact(prefix)),), next_hop(port, dmac))


def usid_entries(my_prefix: int, routes: dict[int, tuple[int, int]]) -> list[TableEntry]:
    """my_usid for `my_prefix` plus usid_fwd prefix -> (port, dmac) for each route."""
    return [my_usid(my_prefix)] + [usid_fwd(p, port, dmac) for p, (port, dmac) in routes.items()]


def port_config(port: int, *, host_facing: bool, ecn_enabled: bool, trim_threshold: int,
                ecn_threshold: int, smac: int) -> TableEntry:
    params = ((N.PARAM_HOST_FACING, int(host_facing)), (N.PARAM_ECN_ENABLED, int(ecn_enabled)),
              (N.PARAM_TRIM_THRESHOLD, trim_threshold), (N.PARAM_ECN_THRESHOLD, ecn_threshold),
              (N.PARAM_SMAC, smac))
    return TableEntry(N.PORT_CONFIG_TABLE, ((N.EGRESS_PORT, Exact(port)),),
                      Action(N.SET_PORT_CONFIG, params))


def route(address: int, prefix_len: int, *, member: int | None = None,
          group: int | None = None) -> TableEntry:
    """routing_v6_table (baseline ECMP): a prefix to one ecmp_selector member or group."""
    if (member is None) == (group is None):
        raise ValueError("a route names exactly one of member and group")
    return TableEntry(N.ROUTING_V6_TABLE, ((N.DST_ADDR, Lpm(address, prefix_len)),),
                      member_id=member, group_id=group)


def ecmp_member(member_id: int, port: int, dmac: int) -> Member:
    return Member(N.ECMP_SELECTOR, member_id, next_hop(port, dmac))


def ecmp_group(group_id: int, member_ids: list[int] | tuple[int, ...]) -> Group:
    return Group(N.ECMP_SELECTOR, group_id, tuple(sorted(member_ids)))


def queue_depth(port: int, depth: int) -> RegisterCell:
    """A preset of the depth register the next ingress decisions read for `port`."""
    return RegisterCell(N.QUEUE_DEPTH_REGISTER, port, depth)
