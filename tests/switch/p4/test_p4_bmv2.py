"""The P4 program on BMv2: it compiles, its P4Info is the committed one, and it passes the
golden corpus. Skipped with a reason where p4c/BMv2 (or root, for veths) are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from controller import p4build
from p4rt.corpus import Case, load_cases
from rigs import bmv2_corpus
from tests.support import require_bmv2, require_root

ROOT = Path(__file__).resolve().parents[3]
COMMITTED_P4INFO = ROOT / "p4src" / "mrc.p4info.txtpb"
CASES = load_cases()


def test_build_script_says_what_to_install(tmp_path: Path) -> None:
    if shutil.which("p4c-bm2-ss", path="/usr/bin:/bin"):
        pytest.skip("p4c-bm2-ss is in /usr/bin: cannot hide it from build.sh")
    result = subprocess.run([str(ROOT / "p4src" / "build.sh"), str(tmp_path)],
                            capture_output=True, text=True,
                            env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert "p4c-bm2-ss" in result.stderr and "scripts/install-p4lang.sh" in result.stderr


@pytest.mark.bmv2
def test_committed_p4info_is_p4c_output(tmp_path: Path) -> None:
    """The compiler is the source of truth: the committed P4Info is its output, byte for byte.
    After changing p4src/, run p4src/build.sh and copy build/mrc.p4info.txtpb over it."""
    require_bmv2(("p4c-bm2-ss",))
    _, built = p4build.compile_program(tmp_path)
    assert built.read_bytes() == COMMITTED_P4INFO.read_bytes(), \
        f"p4c's P4Info ({built}) differs from p4src/mrc.p4info.txtpb: copy it over"


@pytest.fixture(scope="module")
def harness():
    require_bmv2(bmv2_corpus.TOOLS)
    require_root("creating veth pairs")
    with bmv2_corpus.Bmv2Harness() as h:
        yield h


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_golden_case_on_bmv2(harness: bmv2_corpus.Bmv2Harness, case: Case) -> None:
    assert bmv2_corpus.check(case, harness.run(case)) == []


def test_check_reports_differences() -> None:
    """The comparison itself, without a switch: it must catch wrong, missing and extra frames."""
    forwarded = next(c for c in CASES if c.outputs and not c.one_of)
    dropped = next(c for c in CASES if c.drop_reason)
    ecmp = next(c for c in CASES if c.one_of)
    good = [(o.port, o.frame) for o in forwarded.outputs]
    obs = bmv2_corpus.Observed
    assert bmv2_corpus.check(forwarded, obs(good, forwarded.counters)) == []
    assert bmv2_corpus.check(forwarded, obs([], forwarded.counters)) != []
    assert bmv2_corpus.check(forwarded, obs([(9, good[0][1])], forwarded.counters)) != []
    assert bmv2_corpus.check(dropped, obs([], dropped.counters)) == []
    assert bmv2_corpus.check(dropped, obs(good, dropped.counters)) != []
    assert bmv2_corpus.check(dropped, obs([], {})) != []
    member = (ecmp.outputs[1].port, ecmp.outputs[1].frame)
    assert bmv2_corpus.check(ecmp, obs([member], ecmp.counters)) == []
    assert bmv2_corpus.check(ecmp, obs([member, member], ecmp.counters)) != []
