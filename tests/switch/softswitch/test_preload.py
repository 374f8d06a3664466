"""softswitch.preload: a switch loaded from the controller's entities holds exactly the state
its INSERT messages make through DeviceState.write, and refuses what a Write refuses."""

from __future__ import annotations

import grpc
import pytest

from controller.tables import switch_tables
from fabric.options import PRESETS
from fabric.topology import Fabric
from p4rt import names as N
from p4rt import program
from p4rt.codec import Codec
from p4rt.entities import Action, Exact, TableEntry
from softswitch.errors import P4RTError
from softswitch.preload import Preloader
from softswitch.store import DeviceState

CODEC = Codec.committed()


def _snapshot(state: DeviceState) -> dict:
    """Everything the pipeline and Read see of a device state, as plain values."""
    return {
        "tables": {tid: ({key: (e.priority, e.action, e.proto.SerializeToString(),
                                e.packets, e.bytes) for key, e in t.entries.items()},
                         t.default_action)
                   for tid, t in state.tables.items()},
        "members": state.members,
        "member_protos": {p: {m: state.member_proto(p, m).SerializeToString() for m in protos}
                          for p, protos in state.member_protos.items()},
        "handles": state.member_handles,
        "groups": {p: {g: (grp.member_ids, grp.slots, grp.weights, grp.proto.SerializeToString())
                       for g, grp in groups.items()} for p, groups in state.groups.items()},
        "counters": state.counters,
        "registers": state.registers,
    }


@pytest.mark.parametrize("fabric", [Fabric(), Fabric(*PRESETS["hosts-16"]),
                                    Fabric(planes=2, t0_per_plane=3, t1_per_plane=2,
                                           hosts_per_t0=1)], ids=str)
def test_every_switch_equals_its_written_state(fabric: Fabric) -> None:
    preloader = Preloader(CODEC)
    for switch in fabric.switches:
        entities = switch_tables(fabric, switch).entities()
        written = DeviceState(CODEC.index)
        assert written.write(CODEC.inserts(list(entities))) == [None] * len(entities)
        loaded = DeviceState(CODEC.index)
        preloader.install(loaded, entities)
        assert _snapshot(loaded) == _snapshot(written), switch.name
        assert loaded.generation == written.generation == 1
        for t in loaded.tables.values():  # the lookup structures were rebuilt
            if t.all_exact:
                assert all(t.exact[e.key] is e for e in t.entries.values())


def test_a_compiled_entity_is_shared_but_each_switch_counts_its_own_hits() -> None:
    fabric = Fabric()
    preloader = Preloader(CODEC)
    a, b = DeviceState(CODEC.index), DeviceState(CODEC.index)
    t0s = [s for s in fabric.switches if s.plane == 0 and s.name.startswith("p0l")]
    preloader.install(a, switch_tables(fabric, t0s[0]).entities())
    preloader.install(b, switch_tables(fabric, t0s[1]).entities())
    table = CODEC.id(N.USID_FWD_TABLE)  # the spines' uSIDs: on every T0 of a plane
    shared = set(a.tables[table].entries) & set(b.tables[table].entries)
    assert shared
    key = next(iter(shared))
    a.tables[table].entries[key].packets += 1
    assert b.tables[table].entries[key].packets == 0
    assert a.tables[table].entries[key] is not b.tables[table].entries[key]


def _refusal(entities: list) -> P4RTError:
    with pytest.raises(P4RTError) as caught:
        Preloader(CODEC).install(DeviceState(CODEC.index), entities)
    return caught.value


def test_refuses_what_a_write_refuses() -> None:
    member = program.ecmp_member(1, 1, 0xA)
    assert _refusal([member, member]).code == grpc.StatusCode.ALREADY_EXISTS
    assert _refusal([program.route(1 << 120, 8, group=7)]).code == grpc.StatusCode.NOT_FOUND
    assert _refusal([program.ecmp_group(1, (3,))]).code == grpc.StatusCode.NOT_FOUND
    too_wide = program.usid_fwd(1 << 48, 1, 0xA)
    assert _refusal([too_wide]).code == grpc.StatusCode.INVALID_ARGUMENT
    wrong_action = TableEntry(N.USID_FWD_TABLE, ((N.USID_PREFIX, Exact(5)),),
                              Action(N.SET_PORT_CONFIG, ()))
    assert "not an action of table" in str(_refusal([wrong_action]))
    unknown = TableEntry(N.USID_FWD_TABLE, (("no_such_field", Exact(5)),),
                         program.next_hop(1, 0xA))
    assert "unknown match fields" in str(_refusal([unknown]))
    # the same entities through a Write are refused with the same codes
    state = DeviceState(CODEC.index)
    assert [e.code if e else None for e in state.write(CODEC.inserts([member, member]))] == [
        None, grpc.StatusCode.ALREADY_EXISTS]


def test_a_refused_install_still_moves_the_generation() -> None:
    state = DeviceState(CODEC.index)
    with pytest.raises(P4RTError):
        Preloader(CODEC).install(state, [program.route(1 << 120, 8, group=7)])
    assert state.generation == 1
