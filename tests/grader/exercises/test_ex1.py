"""Exercise 1 (uSID forwarding in P4) and the P4 grading machinery (rubrics.p4).

Fast: the file sets, the shift model and the decoy entries against the corpus, compiler
message mapping, the compile cache (with a stand-in compiler), what the P4 stages say without
p4c or BMv2. With p4c: a syntax error reported at its line. Slow (BMv2, root): the skeleton
fails at the corpus stage, each wrong solution fails its named check, the solution gets full
marks (with Mininet, the live stage too).
"""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader import catalog, challenge, judging, regions, workspace
from grader.report import Check
from rubrics import ex1, p4, p4_judge
from tests.grader import p4_support as S
from tests.support import require_bmv2

EX = catalog.load(1)
FILE = "p4src/include/ingress.p4"
WRONG = {w.name: w for w in EX.wrong_solutions()}


# ---- fast -------------------------------------------------------------------------------------

def test_file_sets_cut_only_exercise_1() -> None:
    solution = workspace.solution(EX)[FILE]
    skeleton = workspace.skeleton(EX)[FILE]
    assert solution == (catalog.ROOT / FILE).read_text()
    assert [r.name for r in regions.find(solution) if r.number == 1] == ["shift",
                                                                        "usid-forwarding"]
    for name in ("shift", "usid-forwarding"):
        assert "TODO exercise 1" in regions.body(skeleton, 1, name)
    for name in ("trim", "ecn", "priority"):  # exercise 2's regions stay solved
        assert regions.body(skeleton, 2, name) == regions.body(solution, 2, name)
    assert len(WRONG) >= 2
    for wrong in WRONG.values():
        assert workspace.fixture(EX, wrong)[FILE] != solution
        assert workspace.fixture_expectation(wrong)["fails"] in {
            "usid.my-usid", "usid.shift", "usid.fwd"}


def test_shift_model_is_the_corpus_shift() -> None:
    cases = p4_judge.load_cases(ex1.SHIFTED)
    for case in cases.values():
        want = p4_judge.outer_dst(case.outputs[0].frame)
        assert ex1.shift(p4_judge.outer_dst(case.frame)) == want


def test_decoys_leave_the_golden_expectation_alone() -> None:
    """Decoy entries never match the key a correct program looks up, use a port no case
    uses, and each common mistake is told apart by its DA."""
    golden = p4_judge.load_cases(ex1.SHIFTED + ex1.UNKNOWN)
    for case in ex1.cases():
        da = p4_judge.outer_dst(case.frame)
        added = case.entities[len(golden[case.name].entities):] if case.name in golden else ()
        assert all(e.match_dict["usid_prefix"].value != ex1.prefix(ex1.shift(da))
                   for e in added)
        assert all(o.port != ex1.DECOY_PORT for o in case.outputs)
        if case.name in ex1.SHIFTED:
            assert added, case.name
            seen = {m(da) for _, m, _ in ex1.MISTAKES}
            assert len(seen) == len(ex1.MISTAKES) and ex1.shift(da) not in seen


def _left(case, port: int, da: int, dmac: int | None = None) -> p4_judge.Outcome:
    """An outcome as a switch would give it: the case's expected frame with another DA (and
    destination MAC), on `port`."""
    from wire import layout as L

    frame = bytearray(case.outputs[0].frame)
    frame[L.OUTER_DST:L.OUTER_DST + 16] = da.to_bytes(16, "big")
    if dmac is not None:
        frame[L.ETH_DST:L.ETH_DST + 6] = dmac.to_bytes(6, "big")
    return p4_judge.Outcome(case, [(port, bytes(frame))])


def test_the_judges_name_the_mistake() -> None:
    """Without a switch: outcomes shaped like those of the wrong solutions get their hints."""
    case = next(c for c in ex1.cases() if c.name == "usid_shift_t0_up")
    da = p4_judge.outer_dst(case.frame)
    index = [m for m, _, _ in ex1.MISTAKES].index("shift8")
    by8 = _left(case, ex1.DECOY_PORT, ex1.shift(da, 8), ex1.DECOY_MAC + index)
    check = p4_judge.group_check("usid.shift", "t", 1, [by8], ex1.judge_shift)
    assert not check.passed and "the shift moved 8 bits, not 16" in check.hint
    assert f"left on port {ex1.DECOY_PORT}" in check.observed and "expected" not in check.hint
    assert "fcbb:bbbb:100:200:101:e02::" in check.observed
    assert ex1.judge_my_usid(by8) is None  # it took the uSID path: only the shift is wrong
    index = [m for m, _, _ in ex1.MISTAKES].index("none")
    stale = _left(case, ex1.DECOY_PORT, ex1.shift(da), ex1.DECOY_MAC + index)
    assert ex1.judge_shift(stale) is None
    assert "before the shift" in ex1.judge_fwd(stale).hint
    routed = p4_judge.Outcome(case, [], drop="NO_ROUTE")
    assert "my_usid_table" in ex1.judge_my_usid(routed).hint
    right = p4_judge.Outcome(case, [(case.outputs[0].port, case.outputs[0].frame)], counters={})
    assert all(j(right) is None for j in (ex1.judge_my_usid, ex1.judge_shift, ex1.judge_fwd))


def test_compiler_messages_name_the_students_file_and_line(tmp_path: Path) -> None:
    text = (f"{tmp_path}/p4src/include/ingress.p4(123): [--Werror=type-error] error: x\n"
            "p4src/./include/ingress.p4(7):syntax error, unexpected IDENTIFIER\n"
            "p4src/include/defines.p4:3:1: error: #endif without #if\n")
    out = p4.map_messages(text, tmp_path).splitlines()
    assert out[0].startswith("p4src/include/ingress.p4:123: [--Werror=type-error] error")
    assert out[1].startswith("p4src/include/ingress.p4:7: syntax error")
    assert out[2].startswith("p4src/include/defines.p4:3: error")


FAKE_P4C = """#!/bin/sh
# stand-in for p4c-bm2-ss: counts its runs, writes the two outputs
[ "$1" = "--version" ] && { echo "fake 1.0"; exit 0; }
echo run >> "$FAKE_P4C_LOG"
while [ $# -gt 0 ]; do
  case "$1" in
    -o) shift; echo '{}' > "$1";;
    --p4runtime-files) shift; echo '' > "$1";;
  esac
  shift
done
"""


def test_compiles_are_cached_by_source_hash(tmp_path: Path, monkeypatch) -> None:
    bin_dir, root, log = tmp_path / "bin", tmp_path / "project", tmp_path / "runs"
    bin_dir.mkdir()
    fake = bin_dir / p4.COMPILER
    fake.write_text(FAKE_P4C)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    (root / "p4src" / "include").mkdir(parents=True)
    (root / "p4src" / "mrc.p4").write_text("// main\n")
    (root / "p4src" / "include" / "ingress.p4").write_text("// v1\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv(p4.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_P4C_LOG", str(log))
    first = p4.compile_program(root)
    again = p4.compile_program(root)
    assert first.ok and again.ok and not first.cached and again.cached
    assert log.read_text().count("run") == 1
    built = root / "p4src" / "build" / "mrc.json"
    assert built.exists() and built.stat().st_mtime >= (root / "p4src" / "mrc.p4").stat().st_mtime
    (root / "p4src" / "include" / "ingress.p4").write_text("// v2\n")
    assert not p4.compile_program(root).cached
    assert log.read_text().count("run") == 2
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] \
        and not any(p.name.startswith(".build-") for p in (tmp_path / "cache").iterdir())


def test_without_p4c_the_compile_check_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setattr(p4.shutil, "which", lambda _name: None)
    ctx = SimpleNamespace(root=catalog.ROOT, target="bmv2", is_root=True)
    checks, ok = p4.compile_stage(ctx)
    assert not ok and [c.id for c in checks] == ["p4.compile", "p4.interface"]
    assert "install-p4lang.sh" in checks[0].observed and "target soft" in checks[0].observed


def test_target_soft_cannot_run_a_p4_program() -> None:
    reason = p4.bmv2_missing(SimpleNamespace(target="soft", is_root=True))
    assert "target soft" in reason and "--target bmv2" in reason


def _judged(obs: dict, target: str = "bmv2") -> dict[str, Check]:
    judged = judging.judge(EX, {"observations": obs}, target, challenge=challenge.new())
    return {c.id: c for c in judged}


def test_the_judge_decides_from_raw_observations() -> None:
    """A correct switch's report gets full marks; the judge gates the stages itself, reads the
    committed P4Info from the trusted project and believes no claim the frames do not back."""
    good = S.correct_observations(ex1.cases())
    assert all(c.passed for c in _judged(good).values())
    soft = _judged(good, "soft")  # BMv2 data in the report do not make target soft run it
    assert soft["usid.shift"].observed.startswith(S.NOT_RUN + " target soft")
    assert soft["live.transfer"].observed == "not run: the corpus cases failed"
    dropped = copy.deepcopy(good)
    dropped["corpus"]["cases"]["usid_shift_t0_up"] = {
        "outputs": [], "counters": {"IngressPipeImpl.drop_counter": {"3": 1}}, "error": ""}
    checks = _judged(dropped)
    assert not checks["usid.my-usid"].passed and "dropped (NO_ROUTE)" in \
        checks["usid.my-usid"].observed
    assert checks["live.transfer"].observed.startswith(S.NOT_RUN)
    renamed = copy.deepcopy(good)
    renamed["compile"]["p4info_names"][0] += "x"
    checks = _judged(renamed)
    assert not checks["p4.interface"].passed and "missing: " in checks["p4.interface"].observed
    assert checks["usid.shift"].observed == "not run: the program did not compile"
    unreported = copy.deepcopy(good)
    del unreported["live"]
    assert "not reported" in _judged(unreported)["live.transfer"].observed
    no_p4c = _judged({"compile": {"available": False}, "bmv2": {}})
    assert "install-p4lang.sh" in no_p4c["p4.compile"].observed


def test_a_malformed_or_oversized_report_fails_every_check() -> None:
    good = S.correct_observations(ex1.cases())
    case = "usid_shift_t0_up"
    frame = good["corpus"]["cases"][case]["outputs"][0]
    for name, change in [
            ("no corpus", lambda o: o.pop("corpus")),
            ("a case left out", lambda o: o["corpus"]["cases"].pop(case)),
            ("too many frames", lambda o: o["corpus"]["cases"][case].update(
                outputs=[frame] * (p4_judge.MAX_OUTPUTS + 1))),
            ("a huge frame", lambda o: o["corpus"]["cases"][case].update(
                outputs=[[frame[0], "00" * (p4_judge.MAX_FRAME + 1)]])),
            ("not hex", lambda o: o["corpus"]["cases"][case].update(outputs=[[2, "zz"]])),
            ("a string count", lambda o: o["corpus"]["cases"][case]["counters"].update(
                {"IngressPipeImpl.drop_counter": {"0": "1"}})),
            ("a verdict for a name list", lambda o: o["compile"].update(p4info_names=True))]:
        obs = copy.deepcopy(good)
        change(obs)
        checks = _judged(obs)
        assert not any(c.passed for c in checks.values()), name
        assert "malformed" in checks["p4.compile"].observed, name


# ---- p4c only ---------------------------------------------------------------------------------

@pytest.mark.bmv2
def test_a_syntax_error_is_shown_at_its_line() -> None:
    require_bmv2(("p4c-bm2-ss",))
    text = workspace.solution(EX)[FILE]
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "usid_prefix = hdr" in line)
    lines[at] = lines[at].replace("usid_prefix = hdr", "usid_prefix = = hdr")  # a typo
    grade = S.grade(1, {FILE: "".join(lines)}, "syntax-error", target="soft")
    check = grade.checks[0]
    assert check.id == "p4.compile" and not check.passed
    assert check.observed.startswith(f"{FILE}:{at + 1}: syntax error"), check.observed
    assert FILE in check.hint and "mrc-grade-" not in check.observed
    assert all(c.observed.startswith(S.NOT_RUN) for c in grade.checks[1:])


# ---- BMv2 -------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.bmv2
@pytest.mark.root
def test_skeleton_compiles_and_fails_at_the_corpus_stage() -> None:
    S.require_corpus_stage()
    grade = S.grade(1, workspace.skeleton(EX), "skeleton")
    S.assert_useful_failures(grade)
    by_id = {c.id: c for c in grade.checks}
    assert by_id["p4.compile"].passed and by_id["p4.interface"].passed  # the stubs compile
    assert not grade.full_marks and S.first_failure(grade) == "usid.my-usid"
    assert "NO_ROUTE" in by_id["usid.my-usid"].observed
    assert by_id["live.transfer"].observed.startswith(S.NOT_RUN)


@pytest.mark.slow
@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_solution_fails_its_check(name: str) -> None:
    S.require_corpus_stage()
    wrong = WRONG[name]
    expect = workspace.fixture_expectation(wrong)
    grade = S.grade(1, workspace.fixture(EX, wrong), f"wrong/{name}")
    S.assert_useful_failures(grade)
    assert grade.failed(expect["fails"]) and S.first_failure(grade) == expect["fails"], \
        [(c.id, c.passed, c.observed) for c in grade.checks]
    if name == "shift-by-8":
        shift = next(c for c in grade.checks if c.id == "usid.shift")
        assert "the shift moved 8 bits, not 16" in shift.hint
        assert f"port {ex1.DECOY_PORT}" in shift.observed


@pytest.mark.slow
@pytest.mark.bmv2
@pytest.mark.root
def test_solution_gets_full_marks() -> None:
    S.require_live_stage()
    grade = S.grade(1, workspace.solution(EX), "solution")
    assert grade.full_marks, [(c.id, c.observed, c.hint) for c in grade.checks if not c.passed]
