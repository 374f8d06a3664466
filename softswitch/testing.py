"""Building P4Runtime updates by P4Info name, for the tests and the benchmark.

Names come from p4rt/names.py; ids and bitwidths from the P4Info, so these
helpers produce exactly what a controller would send (full-width bytestrings).
"""

from __future__ import annotations

import socket
import subprocess
import time

from p4.v1 import p4runtime_pb2

from p4rt import names as N
from p4rt.p4info import COMMITTED_P4INFO, P4InfoIndex
from p4rt.p4info import load_text as load_p4info


def committed_index() -> P4InfoIndex:
    return P4InfoIndex.build(load_p4info(COMMITTED_P4INFO))


def _bytes(value: int, bitwidth: int) -> bytes:
    return value.to_bytes((bitwidth + 7) // 8, "big")


def action_msg(idx: P4InfoIndex, action: str, params: dict[str, int]) -> p4runtime_pb2.Action:
    info = idx.action(action)
    msg = p4runtime_pb2.Action(action_id=info.id)
    for pid, (pname, width) in info.params.items():
        if pname in params:
            msg.params.add(param_id=pid, value=_bytes(params[pname], width))
    return msg


def table_entry(idx: P4InfoIndex, table: str, match: dict[str, int | tuple[int, int]],
                action: str | None = None, params: dict[str, int] | None = None,
                group: int | None = None, member: int | None = None,
                priority: int = 0) -> p4runtime_pb2.TableEntry:
    """A table entry; a tuple match value is (value, prefix length) for LPM fields."""
    info = idx.table(table)
    entry = p4runtime_pb2.TableEntry(table_id=info.id, priority=priority)
    fields = {f.name: f for f in info.match_fields}
    for name, value in match.items():
        f = fields[name]
        m = entry.match.add(field_id=f.id)
        if isinstance(value, tuple):
            m.lpm.value, m.lpm.prefix_len = _bytes(value[0], f.bitwidth), value[1]
        else:
            m.exact.value = _bytes(value, f.bitwidth)
    if action is not None:
        entry.action.action.CopyFrom(action_msg(idx, action, params or {}))
    elif group is not None:
        entry.action.action_profile_group_id = group
    elif member is not None:
        entry.action.action_profile_member_id = member
    return entry


def update(entity_field: str, message, op: int = p4runtime_pb2.Update.INSERT
           ) -> p4runtime_pb2.Update:
    u = p4runtime_pb2.Update(type=op)
    getattr(u.entity, entity_field).CopyFrom(message)
    return u


def member(idx: P4InfoIndex, member_id: int, port: int, dmac: int
           ) -> p4runtime_pb2.ActionProfileMember:
    return p4runtime_pb2.ActionProfileMember(
        action_profile_id=idx.id_of(N.ECMP_SELECTOR), member_id=member_id,
        action=action_msg(idx, N.SET_NEXT_HOP, {N.PARAM_PORT: port, N.PARAM_DMAC: dmac}))


def group(idx: P4InfoIndex, group_id: int, member_ids: list[int]
          ) -> p4runtime_pb2.ActionProfileGroup:
    g = p4runtime_pb2.ActionProfileGroup(action_profile_id=idx.id_of(N.ECMP_SELECTOR),
                                         group_id=group_id)
    for m in member_ids:
        g.members.add(member_id=m, weight=1)
    return g


def port_config(idx: P4InfoIndex, port: int, host_facing: bool, ecn: bool, trim: int,
                ecn_threshold: int, smac: int) -> p4runtime_pb2.TableEntry:
    return table_entry(idx, N.PORT_CONFIG_TABLE, {N.EGRESS_PORT: port}, N.SET_PORT_CONFIG, {
        N.PARAM_HOST_FACING: int(host_facing), N.PARAM_ECN_ENABLED: int(ecn),
        N.PARAM_TRIM_THRESHOLD: trim, N.PARAM_ECN_THRESHOLD: ecn_threshold,
        N.PARAM_SMAC: smac})


def usid_entries(idx: P4InfoIndex, my_prefix: int, routes: dict[int, tuple[int, int]]
                 ) -> list[p4runtime_pb2.Update]:
    """my_usid for `my_prefix` plus usid_fwd prefix -> (port, dmac) for each route."""
    ups = [update("table_entry", table_entry(idx, N.MY_USID_TABLE, {N.USID_PREFIX: my_prefix},
                                             N.SHIFT_USID))]
    for prefix, (port, dmac) in routes.items():
        ups.append(update("table_entry", table_entry(
            idx, N.USID_FWD_TABLE, {N.USID_PREFIX: prefix}, N.SET_NEXT_HOP,
            {N.PARAM_PORT: port, N.PARAM_DMAC: dmac})))
    return ups


def register_update(idx: P4InfoIndex, name: str, index: int, value: int) -> p4runtime_pb2.Update:
    info = idx.registers[idx.id_of(name)]
    entry = p4runtime_pb2.RegisterEntry(register_id=info.id)
    entry.index.index = index
    entry.data.bitstring = _bytes(value, info.bitwidth)
    return update("register_entry", entry, p4runtime_pb2.Update.MODIFY)


def corpus_updates(idx: P4InfoIndex, case) -> list[p4runtime_pb2.Update]:
    """P4Runtime updates that program a golden corpus case (tests/golden/corpus.py Case):
    its entries (an ECMP entry becomes members + one group) and its register presets."""
    ups: list[p4runtime_pb2.Update] = []
    next_member, next_group = 1, 1
    for e in case.entries:
        match = {m.field: m.value if m.prefix_len is None else (m.value, m.prefix_len)
                 for m in e.match}
        if e.action is not None:
            entry = table_entry(idx, e.table, match, e.action.action, e.action.params)
        else:
            ids = []
            for call in e.group:
                m = p4runtime_pb2.ActionProfileMember(
                    action_profile_id=idx.id_of(N.ECMP_SELECTOR), member_id=next_member,
                    action=action_msg(idx, call.action, call.params))
                ups.append(update("action_profile_member", m))
                ids.append(next_member)
                next_member += 1
            ups.append(update("action_profile_group", group(idx, next_group, ids)))
            entry = table_entry(idx, e.table, match, group=next_group)
            next_group += 1
        ups.append(update("table_entry", entry))
    for name, cells in case.registers.items():
        for index, value in cells.items():
            ups.append(register_update(idx, name, index, value))
    return ups


def reset_pipeline(client, device_id: int, updates: list[p4runtime_pb2.Update],
                   election_low: int = 1) -> None:
    """Recommit the committed P4Info (fresh tables, counters, registers), then write
    `updates`; `client` is a p4runtime_sh P4RuntimeClient that is primary."""
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=device_id,
        action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    req.election_id.low = election_low
    req.config.p4info.CopyFrom(load_p4info(COMMITTED_P4INFO))
    client.stub.SetForwardingPipelineConfig(req)
    if updates:
        write = p4runtime_pb2.WriteRequest()
        write.updates.extend(updates)
        client.write(write)


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Block until 127.0.0.1:port accepts connections; fail if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"switch process exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout} s")
