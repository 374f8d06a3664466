"""Test-suite policy, by layer: tests/unit (contracts, controller, agent and tool units),
tests/core (the sans-IO transport core, tests/core/harness.py), tests/sim (the simulated
fabric), tests/bench (the bench's metrics, runner and tools; kernel_flows is `root`),
tests/switch (P4 program, BMv2, software switch), tests/e2e (Mininet fabrics and live
agents), tests/robustness (soak: hostile input and faults on a live fabric). Everything under
tests/e2e and tests/robustness and every BMv2 test is marked `slow`, so
`./testbed test -m "not slow"` is the quick loop (about a minute). Everything under tests/e2e
and tests/robustness is also marked `root`, and a `root` test skips with a reason when not run
as root. In a student edition, a test that needs an exercise's region still holding its stub
skips and names the exercise (tests/edition_gate.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent / "e2e"
ROBUSTNESS = Path(__file__).resolve().parent / "robustness"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from grader.edition import waiting  # a student edition skips what waits for its stubs
    stubs = waiting()
    for item in items:
        if stubs:
            from tests.edition_gate import waits_for
            marked = frozenset(m.args[0] for m in item.iter_markers("exercise"))
            why = waits_for(Path(str(item.fspath)), bool(item.get_closest_marker("bmv2")),
                            stubs, marked)
            if why:
                item.add_marker(pytest.mark.skip(reason=why))
        parents = Path(str(item.fspath)).parents
        e2e = E2E in parents or ROBUSTNESS in parents
        if e2e or item.get_closest_marker("bmv2"):
            item.add_marker(pytest.mark.slow)
        if e2e:
            item.add_marker(pytest.mark.root)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") and os.geteuid() != 0:
        pytest.skip("needs root (namespaces, raw sockets, Mininet): run `sudo ./testbed test`")
