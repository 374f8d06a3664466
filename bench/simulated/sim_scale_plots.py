"""PNG plots of bench.simulated.sim_scale's summary: bypass time as the fabric grows, and each
contender's P100 over MRC's per fabric."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from bench.plots import COLORS  # noqa: E402


def plot_summary(summary: dict[str, Any], out_dir: Path) -> list[Path]:
    """The plots of the parts that ran (bench.simulated.sim_scale --parts)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = []
    if summary["bypass"]:
        out.append(bypass_vs_hosts(summary["bypass"], out_dir / "sim-bypass-rtts.png"))
    if summary["permutation"]:
        out.append(p100_bars(summary["permutation"], out_dir / "sim-permutation-p100.png"))
    return out


def bypass_vs_hosts(bypass: list[dict[str, Any]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    points = [(b["hosts"], b["recovery_rtts"]) for b in bypass if b["recovery_rtts"] is not None]
    ax.plot([h for h, _ in points], [r for _, r in points], marker="o", color=COLORS["mrc"])
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("hosts in the fabric")
    ax.set_ylabel("base RTTs until the failed link is left")
    ax.set_title("MRC bypass time as the fabric grows (simulator, link failure)")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def p100_bars(permutation: dict[str, dict[str, Any]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.8))
    fabrics = list(permutation)
    contenders = sorted({c for p in permutation.values() for c in p["p100_over_mrc"]})
    width = 0.8 / max(1, len(contenders))
    for i, c in enumerate(contenders):
        values = [permutation[f]["p100_over_mrc"].get(c) or 0.0 for f in fabrics]
        ax.bar([x + i * width for x in range(len(fabrics))], values, width, label=c,
               color=COLORS.get(c))
    ax.axhline(1.0, color=COLORS["mrc"], linewidth=1, label="mrc")
    ax.set_xticks([x + (len(contenders) - 1) * width / 2 for x in range(len(fabrics))],
                  [f"{f} ({permutation[f]['hosts']} hosts)" for f in fabrics])
    ax.set_ylabel("P100 completion / MRC's")
    ax.set_title("Permutation: last flow's completion time against MRC (simulator)")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
