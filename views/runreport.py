"""The replayable run report: one self-contained HTML file (`--report FILE`).

The recordings (views.runview; a demo has one, a bench run one per scenario and
contender) go into the page as JSON; the page's script and style
(views/page/) are inlined, so the file opens from disk with no server and no network,
and can be attached to a lab hand-in. It replays the run: the fabric by plane with every
link's packets/s and the links that were down, the sender's EV grid, and goodput against
capacity with the link events on a timeline, under a slider and a play button.

The file is created new and never written through a symlink (privdir.open_new_file: the demo
runs as root; the path may be in /tmp): an existing file is refused with what to do.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from safety.privdir import new_file_problem, open_new_file
from views.errors import ViewError

VIEW = Path(__file__).resolve().parent / "page"


class ReportError(ViewError, ValueError):
    """The report cannot be written where asked."""


def check_report_path(path: Path) -> None:
    """Refuse before the run what would fail after it."""
    problem = new_file_problem(path)
    if problem:
        raise ReportError(problem)


def render(runs: list[dict[str, Any]], *, title: str,
           live: dict[str, Any] | None = None) -> str:
    """The page as text: no reference to anything outside it. `runs`: the recordings (a
    bench report has one per scenario and contender; the page chooses among them). `live`:
    the live view's page (views.liveview), {"token", "run"}, which polls its server."""
    if not runs:
        raise ReportError("a report needs at least one recorded run")
    data = json.dumps({"runs": runs, "live": live}, separators=(",", ":"), default=str)
    data = data.replace("</", "<\\/")  # a string in the data cannot close the script element
    style = (VIEW / "report.css").read_text()
    script = (VIEW / "report.js").read_text()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{style}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<div id="controls"><select id="run"></select><span id="run-name"></span>
<button id="play">play / pause</button>
<input id="slider" type="range" min="0" value="0"><span id="time"></span>
<span id="live" class="note"></span></div>
<p id="notes" class="note"></p>
<h2>Fabric by plane: link width grows with packets/s (hover for both directions) <span
class="legend"><span class="link-trim"></span>trimming <span class="link-ecn"></span>ECN
marking <span class="link-down"></span>down</span></h2>
<div id="fabric"></div>
<h2>EVs of the focus sender's QP: <span class="legend"><span class="ev-GOOD"></span>in use
<span class="ev-SKIP"></span>resting (ECN, trim) <span class="ev-ASSUMED_BAD"></span>retired,
probed <span class="ev-DENIED"></span>denied</span></h2>
<div id="evs"></div>
<h2>Goodput against capacity, link events</h2>
<div id="timeline"></div>
<h2>Retransmits, trims, NACKs and ECN marks</h2>
<div id="signals"></div>
<p id="counters" class="note"></p>
<script type="application/json" id="run-data">{data}</script>
<script>{script}</script>
</body></html>
"""


def write_report(path: Path, runs: list[dict[str, Any]], *, title: str) -> int:
    """Write the report of `runs` into the new file `path`; its size in bytes."""
    text = render(runs, title=title).encode()
    check_report_path(path)
    with open_new_file(path) as out:
        out.write(text)
    return len(text)
