"""The bench seen as it runs and afterwards: `--web [PORT]` and `--report FILE`.

Every contender run (run_one; each all-reduce contender) is sampled by a RunRecorder
(views.runview) while its flows run. `--web` shows the current run on the live view
(views.liveview), one after another; `--report` keeps every run's recording and writes
them all into one self-contained page at the end, with a chooser (scenario / contender).
Without either option nothing is sampled and the bench costs what it did.

A run's focus (the EV grid, the sender's counters) is its first flow; goodput is the sum over
all its flows' receivers, except for kernel TCP/MPTCP, whose bytes the agents do not see.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from views.liveview import LiveView
from views.runreport import ReportError, check_report_path, write_report
from views.runview import RunRecorder


class BenchView:
    """The run's live view and report (module docstring)."""

    def __init__(self, *, title: str, web_port: int | None = None,
                 report: Path | None = None) -> None:
        if report is not None:
            check_report_path(report)  # refused before an hour of running, not after
        self.title, self.report = title, report
        self.live = LiveView(title=title, port=web_port) if web_port is not None else None
        self.runs: list[dict[str, Any]] = []
        self._names: Counter[str] = Counter()

    def start(self) -> str | None:
        """Start the live view, if asked for; its address."""
        return self.live.start() if self.live is not None else None

    @contextmanager
    def watch(self, net: Any, name: str, flows: list[tuple[int, int]], *,
              capacity_bps: float | None, goodput: bool = True) -> Iterator[None]:
        """Sample `net` while the block runs `flows` (a contender's run called `name`)."""
        self._names[name] += 1
        if self._names[name] > 1:  # the permutation's salts, a scenario's clean and failed
            name = f"{name} #{self._names[name]}"
        recorder = RunRecorder(net, flows, name=name, capacity_bps=capacity_bps,
                               goodput=goodput).start()
        if self.live is not None:
            self.live.show(recorder)
        try:
            yield
        finally:
            recording = recorder.stop()
            if self.report is not None:
                self.runs.append(recording)

    def finish(self) -> str | None:
        """Stop the live view; write the report (if asked for and anything ran): a line
        saying where and how big."""
        if self.live is not None:
            self.live.stop()
        if self.report is None or not self.runs:
            return None
        try:
            size = write_report(self.report, self.runs, title=self.title)
        except (ReportError, OSError) as exc:  # the results are written already: say so
            return f"report not written: {exc}"
        return f"report: {self.report} ({size} bytes, {len(self.runs)} runs); open it in a browser"
