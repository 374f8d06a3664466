"""The software switch's P4Runtime server under a misbehaving client (issue 13, items 9-11):
capacity from the P4Info enforced per update with RESOURCE_EXHAUSTED, per-update status that
always reaches the client, streams that cannot starve unary RPCs, and undecodable requests
that are refused without leaking."""

from __future__ import annotations

import contextlib
import gc
import threading

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4rt import names as N
from p4rt import program
from p4rt.p4info import load_committed
from softswitch import limits
from tests.switch.p4rt_support import CODEC, IDX
from tests.switch.server_support import (
    DEVICE_ID,
    pipeline_request,
    primary_with_pipeline,
    write,
    write_errors,
)

PROFILE = IDX.profiles[IDX.id_of(N.ECMP_SELECTOR)]


def members(first: int, count: int) -> list[p4runtime_pb2.Update]:
    return CODEC.inserts([program.ecmp_member(i, 1, 0xA) for i in range(first, first + count)])


def fill_members(c, count: int) -> None:
    for start in range(1, count + 1, limits.MAX_UPDATES_PER_WRITE):
        write(c, *members(start, min(limits.MAX_UPDATES_PER_WRITE, count + 1 - start)))


def group_update(group_id: int, weights: dict[int, int], max_size: int = 0
                 ) -> p4runtime_pb2.Update:
    u = CODEC.inserts([program.ecmp_group(group_id, sorted(weights))])[0]
    for m in u.entity.action_profile_group.members:
        m.weight = weights[m.member_id]
    u.entity.action_profile_group.max_size = max_size
    return u


def details(exc: grpc.RpcError) -> status_pb2.Status:
    return status_pb2.Status.FromString(dict(exc.trailing_metadata())["grpc-status-details-bin"])


def test_profile_holds_at_most_its_size_in_members(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    assert PROFILE.size == N.ECMP_SELECTOR_SIZE
    fill_members(c, PROFILE.size)
    assert write_errors(c, *members(PROFILE.size + 1, 3)) == [code_pb2.RESOURCE_EXHAUSTED] * 3
    read = p4runtime_pb2.Entity(action_profile_member=p4runtime_pb2.ActionProfileMember(
        action_profile_id=PROFILE.id))
    stored = [e for r in c.read_one(read) for e in r.entities]
    assert len(stored) == PROFILE.size


def test_group_weights_are_bounded_by_the_profile_size(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    write(c, *members(1, 3))
    # one absurd weight: refused at once instead of expanding 2^31 slots
    assert write_errors(c, group_update(1, {1: 2**31 - 1, 2: 1})) == [
        code_pb2.RESOURCE_EXHAUSTED]
    write(c, group_update(1, {1: PROFILE.size - 24, 2: 20}))  # 4 slots left
    # the sum over all groups is bounded too (SumOfWeights, the P4Runtime default)
    assert write_errors(c, group_update(2, {3: 5})) == [code_pb2.RESOURCE_EXHAUSTED]
    write(c, group_update(2, {3: 4}))
    # a group's own max_size, and members listed twice
    assert write_errors(c, group_update(3, {1: 1}, max_size=0),
                        group_update(4, {1: 2, 2: 2}, max_size=3)) == [
        code_pb2.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED]
    dup = group_update(5, {1: 1})
    dup.entity.action_profile_group.members.add(member_id=1, weight=1)
    assert write_errors(c, dup) == [code_pb2.INVALID_ARGUMENT]


def test_sum_of_members_semantics_bound_member_weight(switch):
    _, connect, _ = switch
    p4info = load_committed()
    prof = next(p for p in p4info.action_profiles if p.preamble.id == PROFILE.id)
    prof.max_group_size = 2
    prof.sum_of_members.max_member_weight = 8
    c = connect(10)
    c.stub.SetForwardingPipelineConfig(pipeline_request(10, p4info))
    write(c, *members(1, 3))
    write(c, group_update(1, {1: 8, 2: 8}))  # 2 members, weights up to 8
    assert write_errors(c, group_update(2, {1: 9}), group_update(3, {1: 1, 2: 1, 3: 1})) == [
        code_pb2.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED]


def test_oversized_batch_is_refused_whole_with_a_reason(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    req = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    req.election_id.low = 10
    req.updates.extend(members(1, limits.MAX_UPDATES_PER_WRITE + 1))
    with pytest.raises(grpc.RpcError) as info:
        c.stub.Write(req)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "split the batch" in info.value.details()
    write(c, *members(1, 1))  # nothing of the refused batch was applied


def test_every_update_status_reaches_the_client_in_a_full_failed_batch(switch):
    _, connect, _ = switch
    c = primary_with_pipeline(connect)
    # the largest batch, every update failing with a long message (unknown action ids)
    batch = members(1, limits.MAX_UPDATES_PER_WRITE)
    for u in batch:
        u.entity.action_profile_member.action.action_id = 0x7FFFFFFF
        u.entity.action_profile_member.action_profile_id = PROFILE.id
    write(c, *members(1, 1))
    batch[0] = members(1, 1)[0]  # a duplicate: ALREADY_EXISTS, and its message kept
    req = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, updates=batch)
    req.election_id.low = 10
    with pytest.raises(grpc.RpcError) as info:
        c.stub.Write(req)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    status = details(info.value)
    assert len(status.SerializeToString()) <= limits.STATUS_BUDGET
    errors = []
    for any_msg in status.details:
        err = p4runtime_pb2.Error()
        assert any_msg.Unpack(err)
        errors.append(err)
    assert len(errors) == limits.MAX_UPDATES_PER_WRITE
    assert errors[0].canonical_code == code_pb2.ALREADY_EXISTS and "exists" in errors[0].message
    assert all(e.canonical_code == code_pb2.INVALID_ARGUMENT for e in errors[1:])


def test_bounded_status_keeps_codes_and_says_what_was_omitted():
    from softswitch.errors import P4RTError
    results = [P4RTError(grpc.StatusCode.INVALID_ARGUMENT, "x" * 1000)] * 128
    status = limits.batch_status(results)
    assert status.ByteSize() <= limits.STATUS_BUDGET
    assert "messages omitted" in status.message
    first = p4runtime_pb2.Error()
    status.details[0].Unpack(first)
    assert first.message == "x" * limits.MAX_ERROR_MESSAGE


@contextlib.contextmanager
def open_streams(addr: str, n: int, first: p4runtime_pb2.StreamMessageRequest | None = None):
    """n StreamChannel RPCs that send `first` (if given) and then wait; cancelled on exit."""
    channel = grpc.insecure_channel(addr)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    never = threading.Event()

    def requests():
        if first is not None:
            yield first
        never.wait()

    calls = [stub.StreamChannel(requests()) for _ in range(n)]
    try:
        yield calls
    finally:
        never.set()
        for call in calls:
            call.cancel()
        channel.close()


def test_idle_streams_cannot_starve_unary_rpcs(switch):
    addr, connect, _ = switch
    c = primary_with_pipeline(connect)  # one stream already open
    with open_streams(addr, 15) as calls:
        ended: list[grpc.Call] = []
        done = threading.Condition()

        def on_done(call) -> None:
            with done:
                ended.append(call)
                done.notify_all()

        for call in calls:
            call.add_done_callback(on_done)
        # streams that have not named their device are capped at MAX_STREAMS per switch
        # served, here one (the primary's stream has named it); those past the cap end at once
        expected = 15 - limits.MAX_STREAMS
        with done:
            assert done.wait_for(lambda: len(ended) >= expected, timeout=10)
        assert len(ended) == expected
        assert {call.code() for call in ended} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "at most" in ended[0].details()
        caps = c.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=5)
        assert caps.p4runtime_api_version
        write(c, *members(1, 1))


def test_streams_that_named_the_switch_are_capped_per_switch(switch):
    addr, connect, _ = switch
    c = primary_with_pipeline(connect)  # one of the switch's MAX_STREAMS
    backup = p4runtime_pb2.StreamMessageRequest()  # no election id: a backup client
    backup.arbitration.device_id = DEVICE_ID
    with open_streams(addr, limits.MAX_STREAMS, backup) as calls:
        refused = []
        for call in calls:  # each answers its arbitration, or ends refused
            try:
                next(call)
            except grpc.RpcError as err:
                refused.append(err)
        assert len(refused) == 1
        assert refused[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "at most" in refused[0].details()
        write(c, *members(1, 1))


def test_undecodable_requests_are_refused_counted_and_do_not_leak(switch):
    import grpc._server as grpc_server
    addr, connect, _ = switch
    c = primary_with_pipeline(connect)

    def alive_calls() -> int:
        gc.collect()
        return sum(type(o) is grpc_server._RPCState for o in gc.get_objects())

    before = alive_calls()  # the primary's open stream
    with grpc.insecure_channel(addr) as channel:
        raw = channel.unary_unary("/p4.v1.P4Runtime/Write")
        for _ in range(300):
            with pytest.raises(grpc.RpcError) as info:
                raw(b"\xff" * 32, timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "undecodable WriteRequest" in info.value.details()
    # grpcio's own deserialisation failure path leaves every such call alive
    assert alive_calls() <= before + 1
    write(c, *members(1, 1))  # the server still works


def test_controller_batches_fit_the_server_limit():
    from controller.install import BATCH_SIZE
    assert BATCH_SIZE <= limits.MAX_UPDATES_PER_WRITE
