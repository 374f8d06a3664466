"""`emulated`: servers of tests/cluster/servers.py for a test module (3 unless the module sets
SERVERS), skipped with the reason where they cannot run, checked to leave nothing behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.servers import EmulatedServers, unavailable_reason


@pytest.fixture(scope="module")
def servers(request: pytest.FixtureRequest) -> Iterator[EmulatedServers]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with EmulatedServers(getattr(request.module, "SERVERS", 3)) as emulated:
        yield emulated
    assert emulated.leftovers() == []
