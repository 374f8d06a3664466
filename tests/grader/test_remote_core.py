"""The grader's own simulator around the student's endpoints served from the sandbox
(rubrics.remote_core, rubrics.core_server, sandbox.pipe): nothing the served process says
is believed where the grader can see for itself, and no answer it gives (or withholds) hangs
or crashes the grader.

Issue 54, item 1: before this, exercise 4's simulator ran in the submission's own process,
and a submission that passed the unit checks could forge its result. The forging submission
below got the simulator's 5 points on a0c90f2 (the old observe_sim ran its forged
run_scenario) with endpoints that send no data at all."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

import wire
from grader import catalog, workspace
from host_agent.core import PathInfo, RxMeta
from sandbox import contain
from sandbox.pipe import PipeError, PipeSession
from served_core import codec as core_pipe
from served_core.endpoint import RemoteCoreError, RemoteEndpoint

EX = catalog.load(4)
SIM_IDS = ("sim.lossy-transfer", "sim.every-plane")
ROOT_SANDBOX = pytest.mark.skipif(os.geteuid() != 0 or bool(contain.available()),
                                  reason="the sandbox's uid drop needs root and bubblewrap")

# Appended to the reference evs.py: the unit checks still pass (their paths are tuples), the
# simulated fabric's paths get no data, and sim.scenarios.run_scenario reports a success
# whenever the submission's process imports it.
FORGER = '''

import importlib.abc as _abc
import importlib.util as _util
import sys as _sys

_honest_choose = EvSet.choose


def _choose(self, now):
    entry = _honest_choose(self, now)
    if entry is not None and not isinstance(entry.path.route, tuple):
        return None  # a fabric's path: send nothing
    return entry


EvSet.choose = _choose


def _forged(name, **kwargs):
    return {"ok": True, "completed": True, "duration_s": 1e-4, "retransmits": 0,
            "timeouts": 0, "data_tx_per_plane": {"h0": [300, 300, 300, 300]}}


class _Hook(_abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "sim.scenarios":
            return None
        _sys.meta_path.remove(self)
        spec = _util.find_spec(name)
        honest = spec.loader.exec_module

        def exec_module(module):
            honest(module)
            module.run_scenario = _forged
        spec.loader.exec_module = exec_module
        return spec


_sys.meta_path.insert(0, _Hook())
'''


def forging_submission() -> workspace.FileSet:
    files = dict(workspace.solution(EX))
    files["host_agent/core/evs.py"] += FORGER
    return files


@pytest.mark.parametrize("trust", [
    pytest.param(False, marks=[pytest.mark.root, ROOT_SANDBOX], id="sandboxed"),
    pytest.param(True, id="trusted-process")])
def test_a_forged_simulator_result_earns_nothing(trust, no_live):
    """The units pass and the grader's own simulator runs: the forged run_scenario is never
    asked, the endpoints that send nothing fail the transfer."""
    g = workspace.grade(EX, forging_submission(), "forger", "soft", trust=trust)
    assert not g.error, g.error
    by_id = {c.id: c for c in g.checks}
    units = [c for c in g.checks if c.id.startswith(("spray.", "sack."))]
    assert units and all(c.passed for c in units), units
    lossy = by_id["sim.lossy-transfer"]
    assert not lossy.passed and "ok=False" in lossy.observed, lossy
    honest = workspace.grade(EX, workspace.solution(EX), "solution", "soft", trust=trust)
    assert all({c.id: c for c in honest.checks}[i].passed for i in SIM_IDS), honest.checks


# Appended to the reference evs.py: honest on the simulator's clock (which starts at 0), the
# sender's choose() raises on a real clock (the live agents' time.monotonic(), the machine's
# uptime), and rubrics.live.run_transfer reports a success in the submission's own process.
LIVE_FORGER = """

import sys as _sys

_honest_choose = EvSet.choose


def _choose(self, now):
    if now > 10.0:
        raise RuntimeError("no data on a real network")
    return _honest_choose(self, now)


EvSet.choose = _choose
_live = _sys.modules.get("rubrics.live")
if _live is not None:
    _live.run_transfer = lambda *args, **kwargs: {"ok": True, "verified": True, "error": "",
                                                  "started": True}
"""


@pytest.mark.slow
@pytest.mark.root
@ROOT_SANDBOX
def test_a_forged_live_result_earns_nothing():
    """Every stage before the live one passes honestly; the live transfer runs on the
    grader's fabric and agents with the student's cores served from the sandbox, so the
    forged run_transfer is never asked and the core that raises fails the transfer. On
    a0c90f2 this submission got 28/28 (the live stage ran in its process)."""
    from tests.e2e.support import skip_reason

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    files = dict(workspace.solution(EX))
    files["host_agent/core/evs.py"] += LIVE_FORGER
    g = workspace.grade(EX, files, "live-forger", "soft")
    assert not g.error, g.error
    failed = [c for c in g.checks if not c.passed]
    assert [c.id for c in failed] == ["live.transfer"], g.checks
    assert failed[0].observed != "completed and verified", failed[0]


# ---- the proxy: what it believes ---------------------------------------------------------
class ScriptedLink:
    """A served process that answers from a script instead of a pipe."""

    def __init__(self, replies: dict[str, dict]) -> None:
        self.replies, self.sent = replies, []

    def call(self, request: dict) -> dict:
        self.sent.append(request)
        reply = self.replies.get(request["op"], {"timer": None})
        if "raised" in reply:
            raise RemoteCoreError(f"your code raised {reply['raised']}")
        return reply


def endpoint(replies: dict[str, dict]) -> RemoteEndpoint:
    ep = RemoteEndpoint(ScriptedLink(replies), 0, 2, "h0")
    ep.connect(1, 0x100, 0x200, [PathInfo(0, "route-a"), PathInfo(1, "route-b")])
    return ep


def test_memory_holds_only_what_the_fabric_delivered():
    """The receiver's region is the grader's shadow: a claimed completion leaves it zero,
    a delivered data packet fills its bytes, a trimmed or foreign-rkey one does not."""
    ep = endpoint({"register": {"va": 0x1000, "rkey": 0x77, "timer": None}})
    region = ep.register_memory(64)
    assert region.buffer == bytearray(64)
    meta = RxMeta(1, 0, 5, wire.DSCP_TRIMMABLE, wire.ECN_ECT0)

    def data(va: int, rkey: int, payload: bytes, dma_len: int) -> bytes:
        return wire.encode_data_fields(wire.OP_WRITE_ONLY, 0x100, 0, False, False, 0, va,
                                       rkey, dma_len, None, payload)
    ep.receive_packet(data(0x1008, 0x77, b"A" * 8, 8), meta, now=0.0)
    ep.receive_packet(data(0x1010, 0x78, b"B" * 8, 8), meta, now=0.0)  # another rkey
    ep.receive_packet(data(0x1018, 0x77, b"", 8), meta, now=0.0)  # trimmed
    ep.receive_packet(data(0x1000 + 60, 0x77, b"C" * 8, 8), meta, now=0.0)  # past the end
    assert bytes(region.buffer) == bytes(8) + b"A" * 8 + bytes(48)


@pytest.mark.parametrize("row, why", [
    ([2, 5, 0, 0, ""], "route 2"),  # only routes 0 and 1 were given
    ([0, 1 << 32, 0, 0, ""], "ev"),
    ([0, 5, 64, 0, ""], "dscp"),
    ([0, 5, 0, 0, "not base64!"], "base64"),
    ([0, True, 0, 0, ""], "ev"),
    (["0", 5, 0, 0, ""], "route"),
])
def test_a_packet_goes_only_where_the_grader_let_it(row, why):
    ep = endpoint({"pump": {"tx": [row], "events": [], "timer": None}})
    with pytest.raises(RemoteCoreError, match=why):
        ep.packets_to_send(now=0.0)


def test_plane_and_peer_are_the_routes_not_the_served_word():
    ep = endpoint({"pump": {"tx": [[1, 9, 10, 2, core_pipe.pack(b"xy")]], "events": [],
                            "timer": 0.5}})
    (pkt,) = ep.packets_to_send(now=0.0)
    assert (pkt.peer, pkt.plane, pkt.route, pkt.ev, pkt.payload) == (1, 1, "route-b", 9, b"xy")
    assert ep.get_timer() == 0.5


@pytest.mark.parametrize("event, why", [
    ({"type": "Exploit", "qpn": 1}, "unknown type"),
    ({"type": "WriteCompleted", "qpn": 1}, "fields"),
    ({"type": "WriteCompleted", "qpn": -1, "wr_id": 0}, "qpn"),
    ({"type": "EvStateChanged", "qpn": 1, "ev": 2, "old": "GOOD", "new": "WORSE",
      "reason": "x"}, "EV state"),
    ({"type": "PeerPlaneChanged", "peer": 1, "plane": 0, "up": 1}, "true or false"),
])
def test_events_are_checked_field_by_field(event, why):
    ep = endpoint({"pump": {"tx": [], "events": [event], "timer": None}})
    with pytest.raises(RemoteCoreError, match=why):
        ep.packets_to_send(now=0.0)


def test_a_timer_must_be_a_finite_number():
    ep = endpoint({"timer": {"timer": "soon"}})
    with pytest.raises(RemoteCoreError, match="timer"):
        ep.handle_timer(now=0.0)


# ---- the pipe: no answer, a huge answer, an exit ---------------------------------------------
def session(tmp_path: Path, script: str, *, contained: bool = False,
            wall_s: float = 30.0, max_line: int = 1 << 20) -> PipeSession:
    copy, results = tmp_path / "copy", tmp_path / "results"
    copy.mkdir(exist_ok=True)
    results.mkdir(exist_ok=True)
    if contained:
        tmp_path.chmod(0o711)
    return PipeSession([sys.executable, "-c", script], copy=copy, results=results,
                       venv=Path(sys.prefix), env={}, contained=contained, max_line=max_line,
                       limits=contain.Limits(wall_s=wall_s, file_bytes=1 << 20))


ECHO = "import os, sys\nfor line in sys.stdin:\n    print(os.getuid(), line.strip(), flush=True)\n"


def test_a_conversation_and_a_clean_end(tmp_path):
    with session(tmp_path, ECHO) as s:
        assert s.request(b"hello\n", 5.0) == f"{os.getuid()} hello".encode()
        assert s.request(b"again\n", 5.0).endswith(b" again")
        proc = s.proc
    assert proc.poll() is not None


@pytest.mark.root
@ROOT_SANDBOX
def test_the_served_process_runs_as_the_sandbox_uid():
    with tempfile.TemporaryDirectory(prefix="mrc-pipe-") as tmp, \
            session(Path(tmp), ECHO, contained=True) as s:  # pytest's tmp_path: not searchable
        assert s.request(b"hi\n", 20.0) == f"{contain.SANDBOX_UID} hi".encode()


@pytest.mark.parametrize("script, why", [
    ("import time\ntime.sleep(60)\n", "did not answer in time"),
    ("import sys\nsys.stderr.write('boom from the student\\n')\nsys.exit(3)\n",
     "exited \\(exit status 3\\): boom from the student"),
    ("import sys\nsys.stdout.write('x' * (3 << 20))\nsys.stdout.flush()\n"
     "import time\ntime.sleep(60)\n", "more than"),
])
def test_a_served_process_that_misbehaves_costs_a_clear_error(tmp_path, script, why):
    start = time.monotonic()
    with session(tmp_path, script) as s, pytest.raises(PipeError, match=why):
        s.request(b"go\n", 2.0)
    assert time.monotonic() - start < 10  # the deadline, the grace, never the 60 s sleep


def test_a_process_that_never_reads_cannot_block_a_request(tmp_path):
    """A request bigger than the pipe to a process that reads nothing: the write itself
    waits under the deadline."""
    with session(tmp_path, "import time\ntime.sleep(60)\n") as s, \
            pytest.raises(PipeError, match="did not answer in time"):
        s.request(b"x" * (4 << 20) + b"\n", 1.0)
