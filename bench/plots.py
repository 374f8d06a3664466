"""PNG plots of a results file: goodput over time (failure marked), per-flow bars, step CDF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from bench import metrics  # noqa: E402

COLORS = {"mrc": "tab:blue", "mrc_no_trim": "tab:cyan", "roce": "tab:red",
          "roce:8": "tab:purple", "roce:16": "tab:brown", "single_port": "tab:gray",
          "tcp": "tab:orange", "mptcp": "tab:green"}
BINS = 60  # goodput-over-time intervals per plot
MIN_BIN_S = 0.1  # emulated runs: kernel receivers deliver in bursts (goodput_over_time)


def plot_run(run: dict[str, Any], out_dir: Path) -> list[Path]:
    """Every plot that applies to the run's scenarios; returns the files written."""
    out: list[Path] = []
    # the simulator's receivers deliver each write when it completes, in simulated time
    min_bin_s = 0.0 if run.get("target") == "sim" else MIN_BIN_S
    for name, sc in run.get("scenarios", {}).items():
        contenders = sc.get("contenders", {})
        if any("failed" in c for c in contenders.values()):
            out.append(goodput_over_time(name, contenders, out_dir / f"{name}-goodput.png",
                                         min_bin_s))
        elif any("salts" in c for c in contenders.values()):
            out.append(flow_rate_cdf(name, contenders, out_dir / f"{name}-flows.png"))
        elif any("flows" in c for c in contenders.values()):
            out.append(per_flow_bars(name, contenders, out_dir / f"{name}-flows.png"))
        if any("step_times_s" in c for c in contenders.values()):
            out.append(step_cdf(name, contenders, out_dir / f"{name}-steps.png"))
    return out


def goodput_over_time(name: str, contenders: dict[str, Any], path: Path,
                      min_bin_s: float = MIN_BIN_S) -> Path:
    """Failed-run goodput per contender, in one bin width for all: min_bin_s at least
    (MIN_BIN_S for emulated runs: kernel receivers hand data to the application in bursts
    when reordering holes fill), and no narrower than the sparsest timeline's mean spacing,
    so that a timeline with a point per write does not plot as spikes between empty bins."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    runs = {n: c["failed"]["flows"][0] for n, c in contenders.items()
            if c.get("failed", {}).get("flows") and c["failed"]["flows"][0].get("timeline")}
    longest = max((f["timeline"][-1][0] for f in runs.values()), default=0.0)
    sparsest = max((f["timeline"][-1][0] / max(1, len(f["timeline"]) - 1)
                    for f in runs.values()), default=0.0)
    interval = max(longest / BINS, min_bin_s, sparsest)
    for cname, flow in runs.items():
        timeline = flow["timeline"]
        series = metrics.goodput_series(timeline, interval, timeline[-1][0])
        ax.step([t for t, _ in series], [v / 1e6 for _, v in series], where="post",
                label=cname, color=COLORS.get(cname))
        at = contenders[cname].get("failure_at_s")
        if at is not None:
            ax.axvline(at, color=COLORS.get(cname, "gray"), linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"seconds since the flow started ({interval * 1000:.3g} ms bins; dashed: "
                  "failure, per contender)")
    ax.set_ylabel("goodput (Mbit/s)")
    ax.set_title(f"{name}: goodput over time")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)


def per_flow_bars(name: str, contenders: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = [n for n, c in contenders.items() if c.get("flows")]
    width = 0.8 / max(1, len(names))
    labels: list[str] = []
    for i, cname in enumerate(names):
        flows = contenders[cname]["flows"]
        labels = [f"h{f['src']}>h{f['dst']}" for f in flows]
        values = [f["bytes"] * 8 / f["completion_s"] / 1e6 if f.get("completion_s") else 0.0
                  for f in flows]
        ax.bar([x + i * width for x in range(len(flows))], values, width, label=cname,
               color=COLORS.get(cname))
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(labels))], labels)
    ax.set_ylabel("flow goodput (Mbit/s, size / completion time)")
    ax.set_title(f"{name}: per-flow goodput (0 = did not complete)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def flow_rate_cdf(name: str, contenders: dict[str, Any], path: Path) -> Path:
    """Per-flow goodput (size / completion) over every salt, as a CDF per contender: hash
    collisions show as a step at a fraction of the fair rate."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for cname, c in contenders.items():
        rates = sorted(f["bytes"] * 8 / f["completion_s"] / 1e6 if f.get("completion_s")
                       else 0.0 for r in c.get("salts", []) for f in r["flows"])
        if rates:
            ax.step(rates, [(i + 1) / len(rates) for i in range(len(rates))], where="post",
                    label=cname, color=COLORS.get(cname))
    ax.set_xlabel("flow goodput (Mbit/s, size / completion time; 0 = did not complete)")
    ax.set_ylabel("fraction of flows (all salts)")
    ax.set_title(f"{name}: per-flow goodput CDF")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)


def step_cdf(name: str, contenders: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for cname, c in contenders.items():
        times = sorted(c.get("step_times_s", []))
        if not times:
            continue
        ax.step(times, [(i + 1) / len(times) for i in range(len(times))], where="post",
                label=cname, color=COLORS.get(cname))
    ax.set_xscale("log")
    ax.set_xlabel("all-reduce step time (s, log)")
    ax.set_ylabel("fraction of steps")
    ax.set_title(f"{name}: step-time CDF (one link fails during the run)")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
