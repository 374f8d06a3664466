"""The P4 program on BMv2: it compiles, its P4Info is the committed one, and it passes the
golden corpus. Skipped with a reason where p4c/BMv2 (or root, for veths) are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from tests import bmv2_runner
from tests.golden.corpus import Case, load_cases

ROOT = Path(__file__).resolve().parents[1]
COMMITTED_P4INFO = ROOT / "p4src" / "mrc.p4info.txtpb"
CASES = load_cases()
INSTALL_HINT = "install the p4lang packages (p4lang-p4c, p4lang-bmv2); see p4src/build.sh"


def _need(tools: tuple[str, ...]) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not on PATH: {INSTALL_HINT}")


def _canonical(info: p4info_pb2.P4Info) -> p4info_pb2.P4Info:
    """Order-independent form: every repeated top-level entity sorted by id."""
    out = p4info_pb2.P4Info()
    out.CopyFrom(info)
    for field in ("tables", "actions", "action_profiles", "counters", "direct_counters",
                  "registers"):
        items = sorted(getattr(out, field), key=lambda e: e.preamble.id)
        del getattr(out, field)[:]
        getattr(out, field).extend(items)
    return out


@pytest.mark.skipif(shutil.which("p4c-bm2-ss") is not None,
                    reason="p4c-bm2-ss is installed: the compile test covers build.sh")
def test_build_script_says_what_to_install() -> None:
    result = subprocess.run([str(ROOT / "p4src" / "build.sh"), tempfile.mkdtemp()],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "p4lang-p4c" in result.stderr and "p4c-bm2-ss" in result.stderr


@pytest.mark.bmv2
def test_committed_p4info_matches_p4c(tmp_path: Path) -> None:
    _need(("p4c-bm2-ss",))
    _, built = bmv2_runner.compile_program(tmp_path)
    compiled = text_format.Parse(built.read_text(), p4info_pb2.P4Info())
    committed = text_format.Parse(COMMITTED_P4INFO.read_text(), p4info_pb2.P4Info())
    assert text_format.MessageToString(_canonical(committed)) == \
        text_format.MessageToString(_canonical(compiled)), \
        f"compiler output differs from the committed P4Info; see {built}"


@pytest.fixture(scope="module")
def harness():
    _need(bmv2_runner.TOOLS)
    if os.geteuid() != 0:
        pytest.skip("creating veth pairs needs root")
    with bmv2_runner.Bmv2Harness() as h:
        yield h


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_golden_case_on_bmv2(harness: bmv2_runner.Bmv2Harness, case: Case) -> None:
    assert bmv2_runner.check(case, harness.run(case)) == []


def test_check_reports_differences() -> None:
    """The comparison itself, without a switch: it must catch wrong, missing and extra frames."""
    forwarded = next(c for c in CASES if c.outputs and not c.one_of)
    dropped = next(c for c in CASES if c.drop_reason)
    ecmp = next(c for c in CASES if c.one_of)
    good = [(o.port, o.frame) for o in forwarded.outputs]
    obs = bmv2_runner.Observed
    assert bmv2_runner.check(forwarded, obs(good, forwarded.counters)) == []
    assert bmv2_runner.check(forwarded, obs([], forwarded.counters)) != []
    assert bmv2_runner.check(forwarded, obs([(9, good[0][1])], forwarded.counters)) != []
    assert bmv2_runner.check(dropped, obs([], dropped.counters)) == []
    assert bmv2_runner.check(dropped, obs(good, dropped.counters)) != []
    assert bmv2_runner.check(dropped, obs([], {})) != []
    member = (ecmp.outputs[1].port, ecmp.outputs[1].frame)
    assert bmv2_runner.check(ecmp, obs([member], ecmp.counters)) == []
    assert bmv2_runner.check(ecmp, obs([member, member], ecmp.counters)) != []
