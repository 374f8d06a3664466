"""A pcap of one fabric link (the CLI's mrc_capture, MrcNetwork.capture).

tcpdump runs in the namespace of one end of the link, on this server (a veth end sees both
directions), for the seconds asked, and is stopped by its PID. It writes into a private
directory of ours; the result is then copied to the caller's file, which must not exist yet
and is opened without following a symlink (privdir.open_new_file): the CLI runs as root and
the file may be in a directory other users can write (/tmp). Open it with tshark and
docs/wireshark/mrc.lua.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulation.netconfig import NetworkError
from safety.privdir import new_file_problem, open_new_file
from safety.procs import stop_process

MAX_CAPTURE_S = 600.0
STOP_TIMEOUT_S = 5.0
_CAPTURED = re.compile(r"(\d+) packets? captured")


def check_request(seconds: float, path: Path) -> None:
    """Refuse what cannot work before anything starts, saying what to change."""
    if not 0 < seconds <= MAX_CAPTURE_S:
        raise NetworkError(f"capture for 0 < SECONDS <= {MAX_CAPTURE_S:g}, got {seconds:g}")
    problem = new_file_problem(path)
    if problem:
        raise NetworkError(problem)
    if shutil.which("tcpdump") is None:
        raise NetworkError("tcpdump is not installed (apt install tcpdump)")


def local_end(link: Any, is_here: Callable[[str], bool]) -> Any:
    """The link's interface whose node runs on this server (a switch end first); `is_here`
    is the run's builder's (emulation.builder)."""
    ends = [i for i in (link.intf1, link.intf2) if is_here(i.node.name)]
    if not ends:
        raise NetworkError(f"{link.intf1.node.name} - {link.intf2.node.name}: both ends run "
                           "on other servers; capture a link with an end on this one")
    return ends[0]


def capture(link: Any, seconds: float, path: Path, is_here: Callable[[str], bool],
            record: Callable[[int], None] | None = None) -> int:
    """Capture `link` for `seconds` into the new file `path`; the frames captured. `record`
    is told tcpdump's PID (the run manifest: a killed run's capture goes with its cleanup)."""
    check_request(seconds, path)
    intf = local_end(link, is_here)
    with tempfile.TemporaryDirectory(prefix="mrc-capture-") as tmp:
        raw = Path(tmp) / "link.pcap"
        proc = intf.node.popen(["tcpdump", "-i", intf.name, "-w", str(raw), "-U", "-Z", "root",
                                "-n", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
        if record is not None:
            record(proc.pid)
        try:
            time.sleep(seconds)
        finally:
            stop_process(proc, STOP_TIMEOUT_S)
        said = proc.stderr.read() if proc.stderr else ""
        if not raw.exists():
            raise NetworkError(f"tcpdump on {intf.name} wrote nothing: {said.strip()}")
        with open_new_file(path) as out, raw.open("rb") as data:
            shutil.copyfileobj(data, out)
    found = _CAPTURED.search(said)
    return int(found.group(1)) if found else 0
