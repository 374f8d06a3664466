"""The fidelity monitor's verdict from synthetic samples (emulation.fidelity.report)."""

from __future__ import annotations

from emulation.fidelity import EMULATION_BOUND, FAITHFUL, report
from wire.layout import FULL_DATA_FRAME_LEN


def _samples(port_pps: float, busy: float, proc_core: float, windows: int = 6) -> list:
    """Samples 1 s apart: one port sending port_pps full frames, CPUs `busy`, h0 `proc_core`."""
    out = []
    for i in range(windows + 1):
        machine = (int(busy * 100 * i), 100 * i)
        out.append((float(i), machine, {"h0": proc_core * i, "s1": 0.1 * i},
                    {"s1:1": int(port_pps * FULL_DATA_FRAME_LEN * i), "s1:2": 0}))
    return out


def test_saturated_cpus_and_a_slow_bottleneck_are_emulation_bound() -> None:
    r = report(_samples(200, busy=0.97, proc_core=0.5), rate=500)
    assert r["verdict"] == EMULATION_BOUND and "97%" in r["why"]
    assert abs(r["bottleneck_over_rate"] - 0.4) < 1e-6


def test_one_saturated_process_is_enough() -> None:
    r = report(_samples(200, busy=0.6, proc_core=0.95), rate=500)
    assert r["verdict"] == EMULATION_BOUND and "h0" in r["why"]


def test_a_port_at_its_rate_is_faithful_even_with_busy_cpus() -> None:
    assert report(_samples(480, busy=0.97, proc_core=0.95), rate=500)["verdict"] == FAITHFUL


def test_idle_ports_with_idle_cpus_are_protocol_limited_not_emulation() -> None:
    r = report(_samples(100, busy=0.3, proc_core=0.2), rate=500)
    assert r["verdict"] == FAITHFUL and "protocol" in r["why"]


def test_no_traffic_gives_no_verdict() -> None:
    assert report(_samples(0, busy=0.2, proc_core=0.1), rate=500)["verdict"] is None


def test_many_noisy_ports_do_not_read_as_a_port_at_its_rate() -> None:
    """100 ports each averaging 35 of 50 frames/s, every window noisy: in every window some
    port is lucky (the max of the window counts is far above 35), but no port ran at its rate."""
    ports, windows, out = 100, 20, []
    sent = dict.fromkeys(range(ports), 0.0)
    for i in range(windows + 1):
        out.append((float(i), (97 * i, 100 * i), {"h0": 0.5 * i},
                    {f"s:{p}": int(sent[p] * FULL_DATA_FRAME_LEN) for p in range(ports)}))
        for p in range(ports):  # 35 on average; +-15 in a pattern that differs per port
            sent[p] += 35 + (15 if (i * 7 + p * 13) % 5 < 2 else -10)
    r = report(out, rate=50)
    assert 33 < r["bottleneck_pps"] < 37
    assert r["verdict"] == EMULATION_BOUND and r["bottleneck_port"] in r["why"]


def test_the_busiest_port_is_named() -> None:
    r = report(_samples(480, busy=0.5, proc_core=0.2), rate=500)
    assert r["bottleneck_port"] == "s1:1" and abs(r["bottleneck_pps"] - 480) < 1


def test_a_process_restarted_between_samples_gives_no_negative_cpu() -> None:
    """bench's loss scenario restarts the agents for RoCE: h0's CPU time fell from one sample
    to the next (a new PID), and the report once said -0.023 cores."""
    samples = [(0.0, (0, 100), {"h0": 5.0, "s": 1.0}, {"p": 0}),
               (1.0, (100, 200), {"h0": 0.1, "s": 1.5}, {"p": 1500}),
               (2.0, (200, 300), {"h0": 0.4, "s": 2.0}, {"p": 3000})]
    out = report(samples, 1)
    assert out["process_cpu"]["h0"] == 0.3 and out["process_cpu"]["s"] == 0.5
    assert all(v >= 0 for v in out["process_cpu"].values())
