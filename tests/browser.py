"""Headless Chromium (Debian's `chromium`) for the report tests: the DOM of a page after its
script ran. The pages are this project's own reports, opened from a file; Chromium's sandbox
needs an unprivileged user namespace setup that root-run tests do not have, hence
--no-sandbox (nothing but our page runs in it, with no network use)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM_TIMEOUT_S = 90


def chromium() -> str | None:
    return shutil.which("chromium")


def dump_dom(page: Path, fragment: str = "") -> str:
    """The page's DOM after load, opened as file://PAGE#FRAGMENT."""
    return dump_url(page.resolve().as_uri() + (f"#{fragment}" if fragment else ""))


def dump_url(url: str, budget_ms: int | None = None) -> str:
    """The DOM at `url` after load, and after `budget_ms` of the page's own time (timers,
    polls) when given."""
    binary = chromium()
    assert binary is not None, "chromium is not installed (apt install chromium)"
    budget = [f"--virtual-time-budget={budget_ms}"] if budget_ms else []
    with tempfile.TemporaryDirectory(prefix="mrc-chromium-") as profile:
        run = subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={profile}", *budget, "--dump-dom", url],
            capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def embedded_runs(page: Path) -> list[dict[str, Any]]:
    """The recordings a report carries (views.runreport)."""
    found = re.search(r'<script type="application/json" id="run-data">(.*?)</script>',
                      page.read_text(), re.S)
    assert found is not None, "no run data in the page"
    return json.loads(found.group(1))["runs"]
