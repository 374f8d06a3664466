"""Write p4src/mrc.p4info.txtpb: the P4Info p4c-bm2-ss emits for mrc.p4, modelled by hand.

p4c is not installable on the development machines, yet the controller and the software
data plane need the P4Info. This script builds it from controller/p4names.py and assigns ids
the way p4c does (control-plane/p4RuntimeSymbolTable.cpp): id = resource-type prefix << 24 |
(Jenkins one-at-a-time hash of the fully qualified name) & 0xFFFFFF, names hashed in sorted
order with linear probing on collisions. tests/test_p4_bmv2.py::test_committed_p4info_matches_p4c
compares the result with real compiler output where p4c exists.

Usage: python p4src/make_p4info.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from controller import p4names as n  # noqa: E402

P4INFO_PATH = Path(__file__).resolve().parent / "mrc.p4info.txtpb"
HEADER = "# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info\n\n"

PREFIX = p4info_pb2.P4Ids.Prefix
EXACT = p4info_pb2.MatchField.EXACT
LPM = p4info_pb2.MatchField.LPM

# (table, [(match field, bitwidth, kind)], [actions], size, implementation, direct counter)
TABLES = (
    (n.MY_USID_TABLE, [(n.USID_PREFIX, n.USID_PREFIX_BITS, EXACT)], [n.SHIFT_USID],
     n.MY_USID_TABLE_SIZE, None, n.MY_USID_COUNTER),
    (n.USID_FWD_TABLE, [(n.USID_PREFIX, n.USID_PREFIX_BITS, EXACT)], [n.SET_NEXT_HOP],
     n.USID_FWD_TABLE_SIZE, None, n.USID_FWD_COUNTER),
    (n.ROUTING_V6_TABLE, [(n.DST_ADDR, n.DST_ADDR_BITS, LPM)], [n.SET_NEXT_HOP],
     n.ROUTING_V6_TABLE_SIZE, n.ECMP_SELECTOR, n.ROUTING_V6_COUNTER),
    (n.PORT_CONFIG_TABLE, [(n.EGRESS_PORT, n.PORT_BITS, EXACT)], [n.SET_PORT_CONFIG],
     n.PORT_COUNT, None, n.PORT_CONFIG_COUNTER),
)
ACTIONS = (n.NO_ACTION, n.SHIFT_USID, n.SET_NEXT_HOP, n.SET_PORT_CONFIG)
# (counter, unit, size)
COUNTERS = (
    (n.DROP_COUNTER, p4info_pb2.CounterSpec.PACKETS, n.DROP_REASON_COUNT),
    (n.TRIM_COUNTER, p4info_pb2.CounterSpec.PACKETS, n.PORT_COUNT),
    (n.ECN_MARK_COUNTER, p4info_pb2.CounterSpec.PACKETS, n.PORT_COUNT),
)
REGISTERS = ((n.QUEUE_DEPTH_REGISTER, n.QDEPTH_BITS, n.PORT_COUNT),)


def jenkins_hash(name: str) -> int:
    """p4c's jenkinsOneAtATimeHash over the name's bytes (32-bit arithmetic)."""
    h = 0
    for byte in name.encode():
        h = (h + byte) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    return (h + (h << 15)) & 0xFFFFFFFF


def assign_ids(prefix: int, names: list[str]) -> dict[str, int]:
    """Sorted names, hashed, linear probing within the 24-bit space like p4c's probeForId."""
    ids: dict[str, int] = {}
    used: set[int] = set()
    for name in sorted(names):
        low = jenkins_hash(name) & 0xFFFFFF
        while (prefix << 24 | low) in used:
            low = (low + 1) & 0xFFFFFF
        ids[name] = prefix << 24 | low
        used.add(ids[name])
    return ids


def alias(name: str, all_names: list[str]) -> str:
    """Shortest dot-separated suffix that no other symbol shares (p4c P4SymbolSuffixSet)."""
    parts = name.split(".")
    for k in range(1, len(parts) + 1):
        suffix = parts[-k:]
        clash = [o for o in all_names if o != name and o.split(".")[-k:] == suffix]
        if not clash:
            return ".".join(suffix)
    return name


def build_p4info() -> p4info_pb2.P4Info:
    table_ids = assign_ids(PREFIX.TABLE, [t[0] for t in TABLES])
    action_ids = assign_ids(PREFIX.ACTION, list(ACTIONS))
    profile_ids = assign_ids(PREFIX.ACTION_PROFILE, [n.ECMP_SELECTOR])
    counter_ids = assign_ids(PREFIX.COUNTER, [c[0] for c in COUNTERS])
    direct_ids = assign_ids(PREFIX.DIRECT_COUNTER, list(n.DIRECT_COUNTERS))
    register_ids = assign_ids(PREFIX.REGISTER, [r[0] for r in REGISTERS])
    everything = [*table_ids, *action_ids, *profile_ids, *counter_ids, *direct_ids,
                  *register_ids]

    def preamble(msg, name: str, ident: int) -> None:
        msg.preamble.id = ident
        msg.preamble.name = name
        msg.preamble.alias = alias(name, everything)

    info = p4info_pb2.P4Info()
    info.pkg_info.arch = "v1model"
    for name, fields, actions, size, impl, counter in TABLES:
        table = info.tables.add()
        preamble(table, name, table_ids[name])
        for i, (field, width, kind) in enumerate(fields, start=1):
            table.match_fields.add(id=i, name=field, bitwidth=width, match_type=kind)
        for action in actions:
            table.action_refs.add(id=action_ids[action])
        table.action_refs.add(id=action_ids[n.NO_ACTION], annotations=["@defaultonly"],
                              scope=p4info_pb2.ActionRef.DEFAULT_ONLY)
        table.const_default_action_id = action_ids[n.NO_ACTION]
        table.initial_default_action.action_id = action_ids[n.NO_ACTION]
        if impl:
            table.implementation_id = profile_ids[impl]
        table.direct_resource_ids.append(direct_ids[counter])
        table.size = size
    for name in ACTIONS:
        action = info.actions.add()
        preamble(action, name, action_ids[name])
        if name == n.NO_ACTION:
            action.preamble.annotations.append('@noWarn("unused")')
        for i, (param, width) in enumerate(n.ACTION_PARAMS[name], start=1):
            action.params.add(id=i, name=param, bitwidth=width)
    profile = info.action_profiles.add()
    preamble(profile, n.ECMP_SELECTOR, profile_ids[n.ECMP_SELECTOR])
    profile.table_ids.append(table_ids[n.ROUTING_V6_TABLE])
    profile.with_selector = True
    profile.size = n.ECMP_SELECTOR_SIZE
    for name, unit, size in COUNTERS:
        counter = info.counters.add()
        preamble(counter, name, counter_ids[name])
        counter.spec.unit = unit
        counter.size = size
    for name, table_name in n.DIRECT_COUNTERS.items():
        direct = info.direct_counters.add()
        preamble(direct, name, direct_ids[name])
        direct.spec.unit = p4info_pb2.CounterSpec.BOTH
        direct.direct_table_id = table_ids[table_name]
    for name, width, size in REGISTERS:
        register = info.registers.add()
        preamble(register, name, register_ids[name])
        register.type_spec.bitstring.bit.bitwidth = width
        register.size = size
    info.type_info.SetInParent()
    return info


def render() -> str:
    return HEADER + text_format.MessageToString(build_p4info())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the committed file differs from what this script writes")
    args = parser.parse_args()
    text = render()
    if args.check:
        if P4INFO_PATH.read_text() != text:
            print(f"{P4INFO_PATH} is out of date: run python p4src/make_p4info.py")
            return 1
        return 0
    P4INFO_PATH.write_text(text)
    print(f"wrote {P4INFO_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
