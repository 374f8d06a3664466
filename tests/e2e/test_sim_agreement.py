"""The simulator and the emulation agree on the same small experiments (bench.simulated.agreement):
link failure, permutation and loss with 10 ms links on the default fabric, three Mininet runs
of each beside one simulator run with the emulated network's parameters, every figure within
its stated tolerance (docs/benchmarks.md, "The simulator against the emulation")."""

from __future__ import annotations

import pytest

from tests.e2e.support import skip_reason

pytest.importorskip("mininet.net", reason="Mininet is not importable (apt install mininet)")

from bench.simulated import agreement  # noqa: E402

pytestmark = [pytest.mark.root, pytest.mark.timeout(300),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


def test_the_simulator_agrees_with_one_emulated_run_of_each_experiment() -> None:
    names = [e.name for e in agreement.EXPERIMENTS]
    # three emulated runs each: the median stands against one odd run (one loss run in nine
    # resent 0.4% of its packets instead of 3%; docs/benchmarks.md)
    out = agreement.run(names, "soft", repeat=3, seeds=1, log=print)
    print(agreement.table(out["rows"]))
    assert {r["experiment"] for r in out["rows"]} == set(names)
    disagree = [r for r in out["rows"] if not r["agrees"]]
    assert not disagree, agreement.table(disagree)
