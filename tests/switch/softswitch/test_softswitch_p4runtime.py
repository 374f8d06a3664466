"""P4Runtime conformance of the software switch's server (in-process, loopback gRPC)."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4rt import names as N
from p4rt import program
from p4rt.p4info import COMMITTED_P4INFO
from p4rt.p4info import load_text as load_p4info
from softswitch.tables import canonical_entry
from tests.switch.p4rt_support import (
    CODEC,
    IDX,
    raw_update,
    usid_entries,
)
from tests.switch.server_support import (
    DEVICE_ID,
    pipeline_request,
    primary_with_pipeline,
    read,
    write,
    write_errors,
)


def test_arbitration_backup_cannot_write(switch):
    _, connect, committed = switch
    primary = connect(10)
    assert primary.get_stream_packet("arbitration", 0.1) is None  # nothing more than the OK
    backup = connect(5)
    with pytest.raises(grpc.RpcError) as info:
        backup.stub.SetForwardingPipelineConfig(pipeline_request(5))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    primary.stub.SetForwardingPipelineConfig(pipeline_request(10))
    assert len(committed) == 1
    req = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    req.election_id.low = 5
    req.updates.extend(usid_entries(0xFCBBBBBB0100, {}))
    with pytest.raises(grpc.RpcError) as info:
        backup.stub.Write(req)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    primary.tear_down()
    msg = backup.get_stream_packet("arbitration", 2)  # the backup is told it is primary now
    assert msg.arbitration.status.code == code_pb2.OK
    write(backup, *usid_entries(0xFCBBBBBB0100, {}))


def test_new_higher_election_id_takes_over(switch):
    _, connect, _ = switch
    first = connect(10)
    connect(20)
    msg = first.get_stream_packet("arbitration", 2)
    assert msg.arbitration.status.code == code_pb2.ALREADY_EXISTS
    assert msg.arbitration.election_id.low == 20


def test_write_before_pipeline_is_refused(switch):
    _, connect, _ = switch
    c = connect(10)
    req = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    req.election_id.low = 10
    with pytest.raises(grpc.RpcError) as info:
        c.stub.Write(req)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_incompatible_p4info_is_rejected_naming_the_gap(switch):
    _, connect, committed = switch
    c = connect(10)
    p4info = load_p4info(COMMITTED_P4INFO)
    del p4info.tables[1]
    p4info.actions[2].params[1].bitwidth = 40
    with pytest.raises(grpc.RpcError) as info:
        c.stub.SetForwardingPipelineConfig(pipeline_request(10, p4info))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "usid_fwd_table" in info.value.details() and "set_next_hop" in info.value.details()
    assert committed == []


def test_get_pipeline_and_capabilities(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    assert c.get_p4info() == load_p4info(COMMITTED_P4INFO)
    assert c.api_version() == "1.4.1"


def test_read_back_equals_written_with_counters(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    ups = usid_entries(0xFCBBBBBB0100, {0xFCBBBBBB0200: (3, 0x0200000002FF)})
    write(c, *ups)
    want = IDX.id_of(N.USID_FWD_TABLE)
    got = read(c, p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=want)))
    assert [e.table_entry for e in got] == [canonical_entry(ups[1].entity.table_entry)]
    query = p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())
    query.table_entry.counter_data.SetInParent()
    got = read(c, query)
    assert len(got) == 2 and all(e.table_entry.HasField("counter_data") for e in got)


def test_invalid_entries_get_the_right_codes(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    good = usid_entries(0xFCBBBBBB0100, {})[0]
    unknown_table = raw_update("table_entry", p4runtime_pb2.TableEntry(table_id=12345))
    wide = raw_update("table_entry", p4runtime_pb2.TableEntry(table_id=IDX.id_of(N.MY_USID_TABLE)))
    wide.entity.table_entry.action.action.action_id = IDX.id_of(N.SHIFT_USID)
    wide.entity.table_entry.match.add(field_id=1).exact.value = b"\x01" + b"\x00" * 6
    missing_param = usid_entries(0xFCBBBBBB0100, {0xFCBBBBBB0201: (3, 1)})[1]
    del missing_param.entity.table_entry.action.action.params[1]
    codes = write_errors(c, good, unknown_table, wide, missing_param, good)
    assert codes == [code_pb2.OK, code_pb2.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT,
                     code_pb2.INVALID_ARGUMENT, code_pb2.ALREADY_EXISTS]
    delete = CODEC.update("DELETE", CODEC.decode(good.entity))
    write(c, delete)
    assert write_errors(c, delete) == [code_pb2.NOT_FOUND]
    modify = CODEC.update("MODIFY", CODEC.decode(good.entity))
    assert write_errors(c, modify) == [code_pb2.NOT_FOUND]


def test_selector_members_groups_registers(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    write(c, *CODEC.inserts([program.ecmp_member(1, 2, 0xA), program.ecmp_member(2, 3, 0xB),
                              program.ecmp_group(9, [1, 2]),
                              program.route(0xFD << 120, 8, group=9),
                              program.queue_depth(4, 17)]))
    profile = IDX.id_of(N.ECMP_SELECTOR)
    groups = read(c, p4runtime_pb2.Entity(action_profile_group=p4runtime_pb2.ActionProfileGroup(
        action_profile_id=profile)))
    assert [m.member_id for m in groups[0].action_profile_group.members] == [1, 2]
    members = read(c, p4runtime_pb2.Entity(
        action_profile_member=p4runtime_pb2.ActionProfileMember(action_profile_id=profile)))
    assert [m.action_profile_member.member_id for m in members] == [1, 2]
    reg = p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry(
        register_id=IDX.id_of(N.QUEUE_DEPTH_REGISTER)))
    reg.register_entry.index.index = 4
    assert read(c, reg)[0].register_entry.data.bitstring == bytes([17])
    # a member still in a group cannot go; a group still used by an entry cannot go
    assert write_errors(c, CODEC.update("DELETE", program.ecmp_member(1, 2, 0xA))) == [
        code_pb2.FAILED_PRECONDITION]
    assert write_errors(c, CODEC.update("DELETE", program.ecmp_group(9, []))) == [
        code_pb2.FAILED_PRECONDITION]
    counters = read(c, p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(
        counter_id=IDX.id_of(N.DROP_COUNTER))))
    assert len(counters) == N.DROP_REASON_COUNT


def test_p4runtime_shell_reads_tables(switch):
    sh = pytest.importorskip("p4runtime_sh.shell")
    addr, connect, _ = switch
    c = primary_with_pipeline(connect)
    write(c, *usid_entries(0xFCBBBBBB0100, {0xFCBBBBBB0200: (3, 0x0200000002FF)}))
    sh.setup(device_id=DEVICE_ID, grpc_addr=addr, election_id=(0, 1), verbose=False)
    try:
        seen = []
        sh.TableEntry(N.USID_FWD_TABLE).read(lambda e: seen.append(e))
        assert len(seen) == 1
        assert int.from_bytes(seen[0].match["usid_prefix"].exact.value, "big") == 0xFCBBBBBB0200
    finally:
        sh.teardown()


def test_stub_wrong_device_id(switch):
    addr, _, _ = switch
    with grpc.insecure_channel(addr) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.GetForwardingPipelineConfig(
                p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=DEVICE_ID + 1))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_reconcile_keeps_entries_verify_and_commit_clears_them(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    write(c, *usid_entries(0xFCBBBBBB0100, {}))
    everything = p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())
    req = pipeline_request(10)
    req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.RECONCILE_AND_COMMIT
    c.stub.SetForwardingPipelineConfig(req)
    assert len(read(c, everything)) == 1
    c.stub.SetForwardingPipelineConfig(pipeline_request(10))
    assert read(c, everything) == []


def test_counter_and_direct_counter_entries(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    ups = usid_entries(0xFCBBBBBB0100, {})
    write(c, *ups)
    cell = p4runtime_pb2.CounterEntry(counter_id=IDX.id_of(N.TRIM_COUNTER))
    cell.index.index = 5
    cell.data.packet_count = 42
    direct = p4runtime_pb2.DirectCounterEntry()
    direct.table_entry.CopyFrom(ups[0].entity.table_entry)
    direct.data.packet_count, direct.data.byte_count = 3, 300
    write(c, raw_update("counter_entry", cell, p4runtime_pb2.Update.MODIFY),
          raw_update("direct_counter_entry", direct, p4runtime_pb2.Update.MODIFY))
    query = p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(
        counter_id=cell.counter_id))
    query.counter_entry.index.index = 5
    assert read(c, query)[0].counter_entry.data.packet_count == 42
    got = read(c, p4runtime_pb2.Entity(direct_counter_entry=p4runtime_pb2.DirectCounterEntry(
        table_entry=p4runtime_pb2.TableEntry(table_id=ups[0].entity.table_entry.table_id))))
    assert [(d.direct_counter_entry.data.packet_count, d.direct_counter_entry.data.byte_count)
            for d in got] == [(3, 300)]
    cell.index.index = N.PORT_COUNT
    assert write_errors(c, raw_update("counter_entry", cell, p4runtime_pb2.Update.MODIFY)) == [
        code_pb2.OUT_OF_RANGE]
