"""The `switch` fixture: the software switch's P4Runtime server in process on a loopback
port, with a `connect(election_low)` that opens clients it tears down afterwards."""

from __future__ import annotations

import pytest
from p4runtime_sh.p4runtime import P4RuntimeClient

from softswitch.router import serve
from softswitch.server import Device
from tests.switch.p4rt_support import free_port
from tests.switch.server_support import DEVICE_ID


@pytest.fixture
def switch():
    committed = []
    device = Device(DEVICE_ID, committed.append)
    addr = f"127.0.0.1:{free_port()}"
    server = serve(device, addr)
    clients: list[P4RuntimeClient] = []

    def connect(election_low: int) -> P4RuntimeClient:
        c = P4RuntimeClient(DEVICE_ID, addr, (0, election_low))
        clients.append(c)
        return c

    try:
        yield addr, connect, committed
    finally:
        for c in clients:
            if hasattr(c, "channel"):  # not already torn down by the test
                c.tear_down()
        server.stop(0).wait()
