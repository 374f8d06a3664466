"""bench.simulated.agreement without Mininet: how the simulator is set up from an emulated run,
how the figures are compared, and the simulator held to the recorded emulation figures
(docs/agreement/agreement.json, a `python -m bench.simulated.agreement --repeat 5 --seeds 5` run).
The live comparison, emulation beside simulator, is tests/e2e/test_sim_agreement.py."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench.simulated import agreement
from emulation.nicpacing import CONTROL_RATE_FACTOR
from wire.layout import DEFAULT_MTU, FULL_DATA_FRAME_LEN

RECORD = Path(__file__).resolve().parents[2] / "docs" / "agreement" / "agreement.json"
NETWORK = {"port_rate_pps": 500, "queue_depth": 128, "ecn_threshold": 16, "trim_threshold": 32,
           "link_delay_s": 0.0}


def test_the_simulator_gets_the_emulated_networks_parameters() -> None:
    s = agreement.sim_settings(NETWORK, seed=3)
    assert s.rate_bps == 500 * FULL_DATA_FRAME_LEN * 8  # a full data frame every 2 ms
    assert s.delay_s > 0 and s.seed == 3
    assert (s.queues.capacity, s.queues.ecn_threshold, s.queues.trim_threshold) == (128, 16, 32)
    assert s.queues.control_rate_factor == CONTROL_RATE_FACTOR  # the emulation's shaping
    assert agreement.sim_settings({**NETWORK, "link_delay_s": 0.01}, 1).delay_s == 0.01


def test_goodput_share_counts_payload_as_the_bench_does() -> None:
    run = {"ok": True, "goodput_bps": 8e6, "capacity_bps": 16e6}
    share = agreement.payload_share  # bench.simulated.sim_bench's, shared
    assert share(run) == pytest.approx(0.5 * FULL_DATA_FRAME_LEN / DEFAULT_MTU)
    assert share({**run, "ok": False}) is None


def _experiment(tolerance: float) -> agreement.Experiment:
    fig = agreement.Figure("x", lambda sc: sc["x"], lambda s: s["run"]["x"], tolerance)
    return agreement.Experiment("e", lambda ctx: {}, 0.0, ("run",), lambda sc: 1, (fig,))


def test_medians_agree_within_the_tolerance_and_not_beyond() -> None:
    emulated = [{"x": 1.0}, {"x": 1.4}, {"x": 1.1}]  # median 1.1
    simulated = [{"run": {"x": 1.3}}]
    (row,) = agreement.compare(_experiment(0.2), emulated, simulated)
    assert row["agrees"] and row["difference"] == pytest.approx(0.2)
    (row,) = agreement.compare(_experiment(0.19), emulated, simulated)
    assert not row["agrees"]
    assert "NO" in agreement.table([row])


def test_a_missing_figure_never_agrees() -> None:
    (row,) = agreement.compare(_experiment(10.0), [{"x": None}], [{"run": {"x": 1.0}}])
    assert not row["agrees"] and row["difference"] is None
    assert "missing" in agreement.table([row])


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        agreement.main(["--only", "permutation,nonsense"])
    assert "choose from" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        agreement.main(["--repeat", "0"])


def test_the_simulator_agrees_with_the_recorded_emulation() -> None:
    """Seed 1 of the simulator, on each recorded experiment's network and sizes, within each
    figure's tolerance of the recorded emulation runs' median."""
    record = json.loads(RECORD.read_text())
    experiments = {e.name: e for e in agreement.EXPERIMENTS}
    assert set(record["experiments"]) == set(experiments)
    rows = {(r["experiment"], r["figure"]): r for r in record["rows"]}
    for name, setup in record["experiments"].items():
        exp = experiments[name]
        simulated = agreement.run_simulated(exp, setup["network"], setup["sim_bytes"], seed=1)
        for fig in exp.figures:
            emulated = rows[(name, fig.name)]["emulated"]
            value = fig.simulated(simulated)
            assert value is not None, (name, fig.name)
            assert abs(value - statistics.median(emulated)) <= fig.tolerance, (
                name, fig.name, value, emulated)
