"""bench.costs.live_cost: the live figures held beside the benches that run the code alone."""

from __future__ import annotations

from bench.costs.live_cost import build_parser, compare, format_rows


def test_compare_puts_each_live_figure_beside_its_bench() -> None:
    live = {"cost": {"switch_cpu_us_per_hop": 45.0, "agent_cpu_ms_per_1000_data_packets": 140.0}}
    forwarding = {"summary": {"soft": {"cpu_us_per_packet": {"median": 10.0, "min": 9.0,
                                                              "max": 11.0}}}}
    agents = {"median_ms_per_1000_data": {"new": {"sender": 30.0, "receiver": 20.0,
                                                  "both": 50.0}}}
    rows = compare(live, forwarding, agents)
    assert [(r["live"], r["alone"], r["live_over_alone"]) for r in rows] == [
        (45.0, 10.0, 4.5), (140.0, 50.0, 2.8)]
    text = format_rows(rows)
    assert "switch CPU per hop" in text and "4.5" in text and "2.8" in text


def test_a_missing_figure_is_not_a_ratio() -> None:
    live = {"cost": {"switch_cpu_us_per_hop": None, "agent_cpu_ms_per_1000_data_packets": 1.0}}
    rows = compare(live, {"summary": {}}, {"median_ms_per_1000_data": {"new": {"both": None}}})
    assert [r["live_over_alone"] for r in rows] == [None, None]
    assert "n/a" in format_rows(rows)


def test_options() -> None:
    args = build_parser().parse_args(["--rate", "300", "--seconds", "2"])
    assert (args.rate, args.seconds, args.fabric) == (300, 2.0, "default")
