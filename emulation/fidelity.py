"""Fidelity monitor: was a contender's figure limited by the emulated network or by the emulation?

Every switch and agent is a process on the same few CPUs. When they cannot keep up, ports run
below their configured packets/s and the figure measures Python, not the fabric. While a
contender runs, a thread samples every SAMPLE_S seconds: CPU time of every switch and agent
process (/proc/PID/stat), all CPUs' busy time (/proc/stat) and every switch port's transmitted
bytes (kernel interface counters, the same for every target). Windows in which some port sent
anything are the run's traffic time. The bottleneck's achieved rate is the busiest port's
bytes over that whole time, in full MRC data frames (wire.layout.FULL_DATA_FRAME_LEN): counted
in bytes so the small ACKs a port also carries (on their own, faster queue) do not pass for
data (kernel TCP's larger frames count as more than one). One average per port, then the max:
the max over ~100 ports of short-window counts, as this monitor once took, reads about 1.5x
high, because some port is always lucky in a noisy window. A ramp at the start and end of a
run counts against the port, so the figure errs low, and the verdict towards emulation-bound.

Verdict: "emulation-bound" when the CPUs (median window >= CPU_SATURATED of all CPUs) or one
process (>= PROCESS_SATURATED of a core) were saturated AND the bottleneck ran below
PORT_AT_RATE of its rate; "faithful" otherwise (a port at its rate is the network's limit; a
contender that leaves ports idle without saturating the CPUs is limited by its protocol).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from wire.layout import FULL_DATA_FRAME_LEN

SAMPLE_S = 0.5
CPU_SATURATED = 0.9
PROCESS_SATURATED = 0.9
PORT_AT_RATE = 0.9
EMULATION_BOUND = "emulation-bound"
FAITHFUL = "faithful"
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def cpu_busy(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Fraction of all CPUs busy between two cpu_times() readings (anyone's processes)."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else None


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of a process in seconds (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / _TICK


def on_cpu_ns(pid: int) -> int | None:
    """A process's time on a CPU in nanoseconds: its live threads' scheduler runtime
    (/proc/PID/task/*/schedstat). utime+stime count 10 ms ticks, too coarse for a short run
    or a per-packet figure (400 frames at about 10 us each fit in one). None once it is gone."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended between the listing and the read
    return total


class Monitor:
    """Samples a running MrcNetwork from a thread between start() and stop()."""

    def __init__(self, net: Any, interval: float = SAMPLE_S) -> None:
        self.net, self.interval = net, interval
        self.rate = net.config.port_rate_pps
        self.switches = [sw.name for sw in net.fabric.switches]
        self.samples: list[tuple[float, tuple[int, int], dict[str, float | None],
                                 dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _pids(self) -> dict[str, int]:
        """Process name -> PID, each process once: software switches share processes, named
        here by their first switch."""
        pids = {f"h{h}": self.net.agent_pid(h) for h in range(self.net.fabric.hosts)}
        pids.update({name: self.net.switch_pid(name) for name in self.switches})
        seen: dict[int, str] = {}
        for name, pid in pids.items():
            if pid is not None and pid not in seen:
                seen[pid] = name
        return {name: pid for pid, name in seen.items()}

    def _sample(self) -> None:
        ports = {f"{name}:{port}": count for name in self.switches
                 for port, count in self.net.port_sent_bytes(name).items()}
        cpu = {name: process_cpu_s(pid) for name, pid in self._pids().items()}
        self.samples.append((time.monotonic(), cpu_times(), cpu, ports))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fidelity")
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._sample()
        return report(self.samples, self.rate)


def report(samples: list, rate: int | None) -> dict[str, Any]:
    """The verdict and its evidence from consecutive samples (see the module docstring)."""
    busy, proc_use, port_bytes, traffic_s = [], {}, {}, 0.0
    for (t0, m0, c0, p0), (t1, m1, c1, p1) in zip(samples, samples[1:], strict=False):
        span = t1 - t0
        if span <= 0:
            continue
        sent = {k: p1[k] - p0.get(k, p1[k]) for k in p1}
        if sum(sent.values()) <= 0:
            continue  # no traffic in this window
        busy.append(cpu_busy(m0, m1) or 0.0)
        for name, cpu in c1.items():
            # CPU time that went down is a new process under the name (an agent restarted
            # in another mode between two samples): no reading for it in this window
            if cpu is not None and c0.get(name) is not None and cpu >= c0[name]:
                proc_use.setdefault(name, []).append((cpu - c0[name]) / span)
        traffic_s += span
        for port, n in sent.items():
            port_bytes[port] = port_bytes.get(port, 0) + n
    out: dict[str, Any] = {"windows": len(busy), "port_rate_pps": rate}
    if not busy:
        out.update(verdict=None, why="no traffic was seen")
        return out
    per_process = {n: statistics.median(v) for n, v in proc_use.items()}
    top = max(per_process, key=per_process.__getitem__) if per_process else None
    port = max(port_bytes, key=port_bytes.__getitem__)
    achieved = port_bytes[port] / FULL_DATA_FRAME_LEN / traffic_s
    out.update(machine_busy=statistics.median(busy), machine_busy_max=max(busy),
               busiest_process=top, busiest_process_cpu=per_process.get(top) if top else None,
               process_cpu={n: round(v, 3) for n, v in sorted(
                   per_process.items(), key=lambda kv: -kv[1])[:6]},
               bottleneck_port=port, bottleneck_pps=achieved,
               bottleneck_over_rate=achieved / rate if rate else None)
    saturated = (out["machine_busy"] >= CPU_SATURATED
                 or (out["busiest_process_cpu"] or 0.0) >= PROCESS_SATURATED)
    below = rate is None or achieved < PORT_AT_RATE * rate
    if saturated and below:
        what = (f"CPUs {out['machine_busy']:.0%} busy" if out["machine_busy"] >= CPU_SATURATED
                else f"{top} used {out['busiest_process_cpu']:.0%} of a core")
        out.update(verdict=EMULATION_BOUND,
                   why=f"{what} while the busiest port ({port}) sent {achieved:.0f} packets/s"
                       + (f" of {rate}" if rate else " (no port rate)"))
    else:
        out.update(verdict=FAITHFUL,
                   why=("the busiest port ran at its rate" if not below
                        else "ports below their rate, CPUs not saturated: protocol-limited"))
    return out
