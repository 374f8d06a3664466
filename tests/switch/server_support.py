"""The software switch's P4Runtime server in process, for the conformance and limits tests:
request helpers (the `switch` fixture is in tests/switch/conftest.py)."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient

from p4rt.p4info import COMMITTED_P4INFO
from p4rt.p4info import load_text as load_p4info

DEVICE_ID = 3


def pipeline_request(election: int, p4info=None):
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID,
        action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    req.election_id.low = election
    req.config.p4info.CopyFrom(p4info if p4info is not None else load_p4info(COMMITTED_P4INFO))
    return req


def write(client: P4RuntimeClient, *updates: p4runtime_pb2.Update) -> None:
    req = p4runtime_pb2.WriteRequest()
    req.updates.extend(updates)
    client.write(req)


def write_errors(client: P4RuntimeClient, *updates) -> list[int]:
    """Canonical code of each update in a failed batch, from the status details."""
    req = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    req.election_id.low = client.election_id[1]
    req.updates.extend(updates)
    with pytest.raises(grpc.RpcError) as info:
        client.stub.Write(req)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    details = dict(info.value.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    codes = []
    for any_msg in status.details:
        err = p4runtime_pb2.Error()
        assert any_msg.Unpack(err)
        codes.append(err.canonical_code)
    return codes


def read(client: P4RuntimeClient, entity: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
    return [e for resp in client.read_one(entity) for e in resp.entities]


def primary_with_pipeline(connect) -> P4RuntimeClient:
    c = connect(10)
    c.stub.SetForwardingPipelineConfig(pipeline_request(10))
    return c
