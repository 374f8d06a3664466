"""The results file of one bench run: environment, validation, and the Markdown summary.

One JSON file per run (results.json in the run's directory) holds everything measured:
{"schema", "command", "started", "quick", "target", "environment", "sizes",
 "scenarios": {name: {"ok", "error", "wall_s", "fabric", "network", "capacity_pps",
                      "contenders", "figures", "targets"}}}
validate() lists what makes a file incomplete or insane; the quick test relies on it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from fabric.options import write_json
from safety.privdir import check_workdir

SCHEMA = 1
REPO = Path(__file__).resolve().parent.parent
SCENARIO_KEYS = ("ok", "error", "wall_s", "fabric", "network", "capacity_pps", "contenders",
                 "figures", "targets")


def environment() -> dict[str, Any]:
    """Versions and machine: enough to tell whether two runs are comparable."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=False).stdout.strip()

    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        mem_kb = 0
    return {"git_commit": git("rev-parse", "HEAD"),
            "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
            "python": sys.version.split()[0], "kernel": platform.release(),
            "machine": platform.machine(), "nproc": os.cpu_count(),
            "memory_bytes": mem_kb * 1024, "load_avg": list(os.getloadavg())}


def prepare_out_dir(out_dir: Path) -> None:
    """Make (0700) or check the directory a run writes its files into, before the run: we
    may be root and the path one the user gave, so a directory another user made or could
    write, or a link on the way, is refused (safety.privdir.check_workdir raises
    UnsafePathError); the files then written inside it need no check of their own. A missing
    parent (the default results/) is made the same way."""
    if not out_dir.parent.exists():
        check_workdir(out_dir.parent)
    check_workdir(out_dir)


def write(run: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    path.write_text(json.dumps(run, indent=1, default=str) + "\n")
    return path


def publish(run: dict[str, Any], out_dir: Path, json_dest: str | None) -> int:
    """A finished run's results.json, summary.md and plots in `out_dir` (made by
    prepare_out_dir before the run), where they are on stdout, the JSON where --json says;
    the exit code: 0 when every scenario is ok."""
    from bench import plots  # plotting loads matplotlib: only for a run that is done
    path = write(run, out_dir)
    (out_dir / "summary.md").write_text(summary_markdown(run))
    written = plots.plot_run(run, out_dir)
    print(f"results: {path}\nsummary: {out_dir / 'summary.md'}\nplots: "
          + ", ".join(p.name for p in written))
    write_json(json_dest, run, default=str)
    return 0 if all(sc.get("ok") for sc in run["scenarios"].values()) else 1


def _finite(value: Any, where: str, problems: list[str]) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            problems.append(f"{where}: {value} is not finite")
        elif value < 0:
            problems.append(f"{where}: {value} is negative")
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in ("timeline", "samples"):
                _finite(v, f"{where}.{k}", problems)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite(v, f"{where}[{i}]", problems)


def validate(run: dict[str, Any]) -> list[str]:
    """Problems that make a results file incomplete or insane (empty list: fine)."""
    problems = [f"missing {k}" for k in ("schema", "environment", "scenarios", "command")
                if k not in run]
    for name, sc in run.get("scenarios", {}).items():
        problems += [f"{name}: missing {k}" for k in SCENARIO_KEYS if k not in sc]
        if not sc.get("ok"):
            problems.append(f"{name}: not ok: {sc.get('error')}")
        _finite({k: v for k, v in sc.items() if k != "contenders"}, name, problems)
        for cname, c in sc.get("contenders", {}).items():
            if "skipped" in c:
                continue
            _finite(c, f"{name}.{cname}", problems)
            for flow in _flows(c):
                problems += _check_flow(flow, f"{name}.{cname}")
        for t in sc.get("targets", []):
            if set(t) != {"figure", "target", "measured", "met"}:
                problems.append(f"{name}: malformed target {t}")
    return problems


def _flows(contender: dict[str, Any]) -> list[dict[str, Any]]:
    if "flows" in contender:
        return contender["flows"]
    if "salts" in contender:
        return [f for r in contender["salts"] for f in r["flows"]]
    return [f for key in ("clean", "failed") for f in contender.get(key, {}).get("flows", [])]


def _check_flow(flow: dict[str, Any], where: str) -> list[str]:
    out = []
    for k in ("src", "dst", "bytes", "ok", "timeline"):
        if k not in flow:
            out.append(f"{where}: flow without {k}")
    timeline = flow.get("timeline", [])
    if timeline and timeline[-1][1] > flow.get("bytes", 0):
        out.append(f"{where}: flow delivered more bytes than it sent")
    if flow.get("ok") and (not timeline or timeline[-1][1] != flow.get("bytes")):
        out.append(f"{where}: flow marked ok but its timeline does not reach its size")
    return out


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}{unit}"
    return f"{v}{unit}"


def summary_markdown(run: dict[str, Any]) -> str:
    """Per scenario: contenders side by side, as ratios to MRC, then the targets."""
    env = run["environment"]
    lines = [f"# Bench run {run['started']}", "",
             f"`{' '.join(run['command'])}` - commit {env['git_commit'][:10]}"
             f"{' (dirty)' if env['git_dirty'] else ''}, Python {env['python']}, kernel "
             f"{env['kernel']}, {env['nproc']} CPUs, {env['memory_bytes'] >> 20} MiB, "
             f"target {run['target']}, {'quick' if run['quick'] else 'full'} sizes.", ""]
    for name, sc in run["scenarios"].items():
        lines += [f"## {name}", ""]
        if not sc.get("ok"):
            lines += [f"**Failed:** {sc.get('error')}", ""]
        net = sc.get("network", {})
        if net:
            lines += [_network_line(net, sc, simulated=run["target"] == "sim"), ""]
        if sc.get("skipped"):
            lines += [f"**Skipped:** {sc['skipped']}", ""]
        lines += _contender_table(sc.get("contenders", {}))
        lines += _figures(sc.get("figures", {}))
        if name in run.get("paper", {}):
            ports = ("these links at tens of Gbit/s, simulated" if run["target"] == "sim"
                     else "these ports at hundreds of packets/s")
            lines += [f"Paper, same experiment: {run['paper'][name]}. (Its NICs run at "
                      f"hundreds of Gbit/s, {ports}: compare ratios, not rates.)", ""]
        targets = sc.get("targets", [])
        if targets:
            lines += ["| figure | target | measured | met |", "|---|---|---|---|"]
            lines += [f"| {t['figure']} | {t['target']} | {_fmt(t['measured'])} | "
                      f"{_fmt(t['met'])} |" for t in targets]
            lines.append("")
    return "\n".join(lines) + "\n"


def _network_line(net: dict[str, Any], sc: dict[str, Any], *, simulated: bool) -> str:
    """The network a scenario ran on: the emulated ports and CPUs, or the simulated links."""
    common = (f"queue {net.get('queue_depth')}, trim at {net.get('trim_threshold')}, base RTT "
              f"{_fmt(net.get('base_rtt_s'), ' s')}, convergence delay "
              f"{_fmt(net.get('convergence_delay_s'))} s")
    if simulated:
        return (f"Simulated links of {_fmt(net.get('link_rate_bps'))} bit/s "
                f"({net.get('port_rate_pps')} full data frames/s), {common}; "
                f"{_fmt(sc.get('wall_s'))} s of wall time.")
    return (f"Port rate {net.get('port_rate_pps')} packets/s, {common}"
            + (f", agents hold {net['rx_hold_ms']:g} ms between wake-ups"
               if net.get("rx_hold_ms") else "") + ". Both CPUs busy "
            f"{_fmt(100 * sc['cpu_busy'] if sc.get('cpu_busy') is not None else None)}"
            f"% of the scenario's {_fmt(sc.get('wall_s'))} s.")


def _contender_table(contenders: dict[str, Any]) -> list[str]:
    rows = []
    base = _key_time(contenders.get("mrc", {}))
    for name, c in contenders.items():
        if "skipped" in c:
            rows.append(f"| {name} | skipped: {c['skipped']} | | | |")
            continue
        t = _key_time(c)
        rows.append(f"| {name} | {_fmt(t, ' s')} | {_fmt(_ratio(t, base))} | "
                    f"{_fmt(_detail(c))} | {_fmt(_ok(c))} | {_fidelity(c)} | {_live_cost(c)} |")
    if not rows:
        return []
    return ["| contender | key time | / MRC | stall RTTs, aggregate/capacity or step P99 | ok "
            "| fidelity | agent ms per 1,000 data packets, switch us per hop |",
            "|---|---|---|---|---|---|---|", *rows, ""]


def _live_cost(c: dict[str, Any]) -> str:
    """The first run's live cost (emulation.livecost): what the processes spent per packet."""
    for part in (c, c.get("clean", {}), *c.get("salts", [])):
        cost = part.get("live_cost") if isinstance(part, dict) else None
        if cost:
            return (f"{_fmt(cost.get('agent_cpu_ms_per_1000_data_packets'))}, "
                    f"{_fmt(cost.get('switch_cpu_us_per_hop'))}")
    return "n/a"


def _fidelity(c: dict[str, Any]) -> str:
    """The monitor's verdicts over a contender's runs (emulation.fidelity), worst first."""
    found = []
    for part in (c, c.get("clean", {}), c.get("failed", {}), *c.get("salts", [])):
        fid = part.get("fidelity") if isinstance(part, dict) else None
        if fid and fid.get("verdict"):
            found.append(fid)
    if not found:
        return "n/a"
    bound = [f for f in found if f["verdict"] == "emulation-bound"]
    if bound:
        return f"**emulation-bound** ({bound[0]['why']})"
    rates = [f.get("bottleneck_over_rate") for f in found if f.get("bottleneck_over_rate")]
    return "faithful" + (f" (bottleneck at {min(rates):.2f} of rate)" if rates else "")


def _figures(figures: dict[str, Any]) -> list[str]:
    """The scenario's figures, one line per entry."""
    if not figures:
        return []
    out = []
    for key, value in figures.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} {_fmt(v)}" for k, v in value.items()
                              if not isinstance(v, (dict, list)) or k == "verdicts")
            out.append(f"- {key}: {inner}")
        elif not isinstance(value, list):
            out.append(f"- {key}: {_fmt(value)}")
    return ["Figures:", "", *out, ""]


def _detail(c: dict[str, Any]) -> float | None:
    """The scenario's second figure: stall (failures), step P99 (allreduce), or utilisation."""
    if "stall_rtts" in c:
        return c["stall_rtts"]
    if "step_time_s" in c:
        return c["step_time_s"]["p99"]
    return c.get("summary", {}).get("aggregate_over_capacity")


def _ok(c: dict[str, Any]) -> bool | None:
    if "ok" in c:
        return c["ok"]
    if "failed" in c:
        return c["clean"]["summary"]["ok"] and c["failed"]["summary"]["ok"]
    return c.get("summary", {}).get("ok")


def _key_time(c: dict[str, Any]) -> float | None:
    """Slowest flow (or failed-run completion, or max step) - the time each table compares."""
    if "step_time_s" in c:
        return c["step_time_s"]["max"]
    if "completion_failed_s" in c:
        return c["completion_failed_s"]
    dist = c.get("summary", {}).get("completion_s")
    return dist["max"] if dist else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b
