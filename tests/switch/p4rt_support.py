"""P4Runtime plumbing the switch tests share: the committed program's codec, updates built from
p4rt entities, a pipeline reset, and waiting for a switch process to listen.

Entries are p4rt.entities built with p4rt.program and encoded by p4rt.codec, exactly as the
controller sends them. `raw_update` is for tests that must send what no codec would produce
(unknown ids, values too wide, missing parameters) to check the server rejects it.
"""

from __future__ import annotations

import socket
import subprocess
import time

from p4.v1 import p4runtime_pb2

from p4rt import program
from p4rt.codec import Codec
from p4rt.entities import RegisterCell
from p4rt.p4info import load_committed

CODEC = Codec.committed()
IDX = CODEC.index


def usid_entries(my_prefix: int, routes: dict[int, tuple[int, int]]
                 ) -> list[p4runtime_pb2.Update]:
    """INSERTs of my_usid for `my_prefix` and usid_fwd prefix -> (port, dmac) per route."""
    return CODEC.inserts(program.usid_entries(my_prefix, routes))


def register_update(name: str, index: int, value: int) -> p4runtime_pb2.Update:
    return CODEC.update("MODIFY", RegisterCell(name, index, value))


def raw_update(entity_field: str, message, op: int = p4runtime_pb2.Update.INSERT
               ) -> p4runtime_pb2.Update:
    """An update around a protobuf message built by hand (for malformed-input tests)."""
    u = p4runtime_pb2.Update(type=op)
    getattr(u.entity, entity_field).CopyFrom(message)
    return u


def reset_pipeline(client, device_id: int, updates: list[p4runtime_pb2.Update],
                   election_low: int = 1) -> None:
    """Recommit the committed P4Info (fresh tables, counters, registers), then write
    `updates`; `client` is a p4runtime_sh P4RuntimeClient that is primary."""
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=device_id,
        action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    req.election_id.low = election_low
    req.config.p4info.CopyFrom(load_committed())
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
