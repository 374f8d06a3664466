"""Exercise 7 (lab): the template fails with useful messages, the computed solution gets full
marks, each wrong-answer fixture fails exactly its named check, answers are bound to their
seed, and the typical slips get the hint that names them. The lab runs the simulator only
(no Mininet, no root): every grading here takes a few seconds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grader import catalog, challenge, course, feedback, judging, workspace
from grader.__main__ import main
from rubrics import ex7

EX = catalog.load(7)


def _grade(files: workspace.FileSet, name: str):  # type: ignore[no-untyped-def]
    return workspace.grade(EX, files, name, "soft")


def _solution_answers() -> dict[str, Any]:
    return json.loads(workspace.solution(EX)[ex7.ANSWERS])


def test_catalog_knows_the_lab() -> None:
    assert EX.kind == "lab" and EX.files == (ex7.ANSWERS,)
    assert EX.regions() == {}
    assert {w.name for w in EX.wrong_solutions()} >= {"rtts-in-ms", "swapped-planes"}


def test_skeleton_fails_first_on_the_form_with_useful_messages() -> None:
    g = _grade(workspace.skeleton(EX), "skeleton")
    assert not g.error and not g.full_marks and g.score == 0
    assert [c.id for c in g.checks] == ["measure.form"] + [q.check_id for q in ex7.QUESTIONS]
    first = g.checks[0]
    assert not first.passed and "no answer" in first.observed
    for c in g.checks:
        assert not c.passed and c.expected and c.observed and c.hint, c
    assert ("python -m sim link-failure --size 4000000 --seed 1 --link-delay 0.001"
            in g.checks[1].hint)


def test_the_lab_takes_no_measurement_hook_of_the_judging(caplog) -> None:
    """ex7's runs were once named `measure`, which grader.judging takes for a judge's hook
    on the report: every grading then logged a TypeError. The hook is absent now."""
    assert getattr(ex7, "measure", None) is None
    with caplog.at_level("WARNING", logger="grader"):
        assert _grade(workspace.solution(EX), "solution").full_marks
    assert not [r for r in caplog.records if "measure" in r.getMessage()]


def test_solution_gets_full_marks() -> None:
    g = _grade(workspace.solution(EX), "solution")
    assert g.full_marks, [c for c in g.checks if not c.passed]


@pytest.mark.parametrize("wrong", EX.wrong_solutions(), ids=lambda p: p.name)
def test_wrong_answers_fail_their_named_check_only(wrong: Path) -> None:
    expect = workspace.fixture_expectation(wrong)
    g = _grade(workspace.fixture(EX, wrong), f"wrong/{wrong.name}")
    failed = [c.id for c in g.checks if not c.passed]
    assert failed == [expect["fails"]], g.checks
    check = next(c for c in g.checks if c.id == expect["fails"])
    assert check.expected and check.observed and check.hint


@pytest.mark.parametrize("wrong", EX.wrong_solutions(), ids=lambda p: p.name)
def test_before_the_due_date_a_student_sees_the_form_only(wrong: Path) -> None:
    """Whether a figure is right, and its hint, would let repeated tries find it: before the
    due date the student's view (check, feedback.md) shows the form check and says how many
    more are held back; after it, each figure's result and hint, never what was expected."""
    g = _grade(workspace.fixture(EX, wrong), f"wrong/{wrong.name}")
    before, after = feedback.student_text(g), feedback.student_text(g, after_due=True)
    assert "measure.form" in before
    assert f"{len(ex7.QUESTIONS)} more check(s)" in before
    for c in g.checks:
        if c.id != "measure.form":
            assert c.id not in before and (c.hint or c.id) not in before
            assert c.id in after and c.expected not in after


def test_answers_are_bound_to_their_delay() -> None:
    """The solution's answers handed in for another link delay: the grader measures that
    fabric and the answers that depend on it fail."""
    data = {**_solution_answers(), "delay_us": 2}
    g = _grade({ex7.ANSWERS: json.dumps(data)}, "other-fabric")
    assert g.checks[0].passed and not g.full_marks
    assert {c.id for c in g.checks if not c.passed} >= {
        "measure.base-rtt", "measure.recovery-rtts", "measure.peer-notified"}


def test_the_seed_alone_moves_no_answer_beyond_its_tolerance() -> None:
    """Why instructors hand out delays (INSTRUCTORS.md): since a failure strikes the busiest
    uplink, as the bench's does, seed 2's figures are within every tolerance of seed 1's."""
    data = {**_solution_answers(), "seed": 2}
    g = _grade({ex7.ANSWERS: json.dumps(data)}, "other-seed")
    assert g.full_marks, [c for c in g.checks if not c.passed]


def _grade_here(tmp_path: Path, data: object) -> dict[str, Any]:
    """The checks in this process (the project's own sim), keyed by id: observed, passed
    through JSON as the sandbox's report is, then judged."""
    (tmp_path / ex7.ANSWERS).write_text(data if isinstance(data, str) else json.dumps(data))
    ctx = SimpleNamespace(root=tmp_path, target="soft", exercise=EX, is_root=False)
    report = {"observations": json.loads(json.dumps(ex7.observe(ctx)))}
    return {c.id: c for c in judging.judge(EX, report, "soft", challenge=challenge.new())}


def test_observe_reports_the_raw_text_only(tmp_path: Path) -> None:
    """No student code runs: the sandbox hands over the file's text, never a verdict."""
    text = workspace.solution(EX)[ex7.ANSWERS]
    (tmp_path / ex7.ANSWERS).write_text(text)
    ctx = SimpleNamespace(root=tmp_path, target="soft", exercise=EX, is_root=False)
    assert ex7.observe(ctx) == {"text": text, "size": len(text.encode()), "unreadable": None}
    (tmp_path / ex7.ANSWERS).write_text(" " * (ex7.MAX_ANSWERS_BYTES + 1))
    assert ex7.observe(ctx)["text"] is None
    (tmp_path / ex7.ANSWERS).unlink()
    assert ex7.observe(ctx)["unreadable"]


def test_files_too_big_or_missing_fail_the_form(tmp_path: Path) -> None:
    checks = _grade_here(tmp_path, "{}" + " " * ex7.MAX_ANSWERS_BYTES)
    assert "KiB" in checks["measure.form"].observed
    assert all(c.observed.startswith("not run") for i, c in checks.items() if i != "measure.form")
    report = {"observations": {"text": None, "size": None, "unreadable": "No such file"}}
    form = judging.judge(EX, report, "soft", challenge=challenge.new())[0]
    assert not form.passed and form.observed == f"cannot read {ex7.ANSWERS}: No such file"


@pytest.mark.parametrize("obs", [
    {"text": 5}, {"text": None}, {}, [], "x",
    {"text": "{}" + " " * (2 * ex7.MAX_ANSWERS_BYTES)},
])
def test_a_forged_or_malformed_report_gets_no_points(obs: Any) -> None:
    """The judge believes nothing but the text, and re-applies the size cap itself."""
    checks = judging.judge(EX, {"observations": obs}, "soft", challenge=challenge.new())
    assert len(checks) == len(ex7.CHECKS) and not any(c.passed for c in checks)


def test_hostile_answers_fail_the_form_without_crashing_the_judge(tmp_path: Path) -> None:
    for text in ("[" * 60_000 + "]" * 60_000,
                 '{"seed": 1, "answers": {"base_rtt_us": 1' + "0" * 400 + "}}",
                 '{"seed": 1, "answers": {"retired_evs": ' + "[" * 500 + "]" * 500 + "}}"):
        checks = _grade_here(tmp_path, text)
        assert not checks["measure.form"].passed
        assert len(checks["measure.form"].observed) < 2000


def test_unusable_file_stops_before_measuring(tmp_path: Path) -> None:
    checks = _grade_here(tmp_path, "{not json")
    assert not checks["measure.form"].passed and "not valid JSON" in checks["measure.form"].observed
    assert all(c.observed.startswith("not run") for i, c in checks.items() if i != "measure.form")
    checks = _grade_here(tmp_path, {"seed": "one", "answers": {}})
    assert "seed" in checks["measure.form"].observed
    checks = _grade_here(tmp_path, {"seed": 1, "delay_us": 1000, "answers": {}})
    assert "delay_us" in checks["measure.form"].observed


@pytest.mark.parametrize("key, wrong, words", [
    ("base_rtt_us", lambda a, r: r["link-failure"]["base_rtt_s"], "seconds"),
    ("recovery_rtts", lambda a, r: r["link-failure"]["recovery_rtts"]
     * r["link-failure"]["base_rtt_s"] * 1e6, "microseconds"),
    ("recovery_rtts", lambda a, r: r["link-failure"]["data_on_failed_path_after_failure"],
     "data packets"),
    ("retired_evs", lambda a, r: 0, "link-failure run's count"),
    ("plane_share", lambda a, r: r["link-failure"]["data_tx_per_plane"]["h0"], "packet counts"),
    ("plane_share", lambda a, r: [100 * x for x in a], "percentages"),
    ("plane_share", lambda a, r: [c / sum(r["link-failure"]["tx_packets_per_plane"]["h0"])
                                  for c in r["link-failure"]["tx_packets_per_plane"]["h0"]],
     "probes included"),
    ("peer_notified_rtts", lambda a, r: r["plane-failure"]["recovery_rtts"], "recovery_rtts"),
    ("goodput_after_plane_failure_vs_clean",
     lambda a, r: r["plane-failure"]["goodput_bps"] / r["clean"]["goodput_bps"], "whole transfer"),
    ("goodput_after_plane_failure_vs_clean", lambda a, r: 0.75, "(planes-1)/planes"),
    ("goodput_after_plane_failure_vs_clean", lambda a, r: 100 * a, "percentage"),
])
def test_typical_slips_get_the_hint_that_names_them(tmp_path: Path, key: str, wrong: Any,
                                                     words: str) -> None:
    data = _solution_answers()
    runs = ex7.lab_runs(ex7.Setup(data["seed"], data["delay_us"]))
    data["answers"][key] = wrong(data["answers"][key], runs)
    checks = _grade_here(tmp_path, data)
    q = next(q for q in ex7.QUESTIONS if q.key == key)
    assert [i for i, c in checks.items() if not c.passed] == [q.check_id]
    assert words in checks[q.check_id].hint, checks[q.check_id]


def test_a_folder_of_submissions_grades_each_student(tmp_path: Path, course_key: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The instructor's run: one sub-folder per student, one JSON entry each."""
    key = course.load_key(create=True)
    assert key is not None
    alice = ex7.assignment(key, "alice")
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / ex7.ANSWERS).write_text(json.dumps({
        "seed": alice.seed, "delay_us": alice.delay_us,
        "answers": ex7.answered(ex7.lab_runs(alice))}))
    workspace.write(workspace.skeleton(EX), subs / "bob")
    report = tmp_path / "report.json"
    rc = main(["grade", "7", "--submission", str(subs), "--target", "soft", "--json",
               str(report)])
    assert rc == 1 and "score 13/13 (full marks)" in capsys.readouterr().out
    data = json.loads(report.read_text())
    assert data["count"] == 2 and data["full_marks"] == 1
    assert [Path(s["submission"]).name for s in data["submissions"]] == ["alice", "bob"]


def test_an_assigned_fabric_answered_right_gets_full_marks(tmp_path: Path) -> None:
    setup = ex7.Setup(seed=7, delay_us=2.5)
    data = {"seed": setup.seed, "delay_us": setup.delay_us,
            "answers": ex7.answered(ex7.lab_runs(setup))}
    checks = _grade_here(tmp_path, data)
    assert all(c.passed for c in checks.values()), [c for c in checks.values() if not c.passed]


# ---- issue 54, attack 6: answers tied to the instructor's assignment, no figure shown -------
def _figures(setup: ex7.Setup) -> list[float]:
    runs = ex7.lab_runs(setup)
    out: list[float] = []
    for q in ex7.QUESTIONS:
        v = q.measured(runs)
        out += [float(x) for x in v] if q.length else [float(v)]
    return out


def _shows(text: str, value: float) -> bool:
    """Whether `text` spells `value` the ways a report would (4 significant digits, 4 or 2
    decimals, the tolerance-free integer)."""
    if value == int(value) and abs(value) < 10:
        return False  # a small count (retired EVs) is spelled by many a sentence anyway
    forms = {f"{value:.4g}", f"{value:.4f}", f"{value:.3g}", f"{value:.2f}"}
    return any(f in text for f in forms)


@pytest.mark.parametrize("answers", ["template", "zeros"])
def test_no_check_shows_a_figure_the_grader_measured(answers: str) -> None:
    """On e54048c an empty submission revealed all six answers as 'expected', and pasting
    them back scored 13/13."""
    files = workspace.skeleton(EX)
    if answers == "zeros":
        data = json.loads(files[ex7.ANSWERS])
        data["answers"] = {q.key: [0.0] * q.length if q.length else 0.0 for q in ex7.QUESTIONS}
        files = {ex7.ANSWERS: json.dumps(data)}
    g = _grade(files, answers)
    text = " ".join(f"{c.expected} {c.observed} {c.hint}" for c in g.checks)
    shown = [v for v in _figures(ex7.Setup()) if _shows(text, v)]
    assert not shown, (shown, text)


@pytest.fixture
def course_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    key = tmp_path / "course" / "key"
    monkeypatch.setenv(course.KEY_ENV, str(key))
    return key


def test_assignments_come_from_the_course_key(course_key: Path, capsys) -> None:
    assert main(["assignment", "7", "--student", "alice", "--student", "bob"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "student,seed,delay_us" and len(rows) == 3
    assert course_key.stat().st_mode & 0o777 == 0o600
    key = course.load_key()
    assert key is not None
    alice = ex7.assignment(key, "alice")
    assert rows[1] == f"alice,{alice.seed},{alice.delay_us:g}"
    assert alice != ex7.assignment(key, "bob") and alice == ex7.assignment(key, "alice")
    assert ex7.assignment(os.urandom(32), "alice") != alice  # another course, another fabric


def test_a_class_is_held_to_each_students_assignment(course_key: Path, tmp_path: Path) -> None:
    """alice hands in the reference's answers (seed 1, delay 1 us, not her fabric) and fails;
    bob measured his own fabric and gets full marks."""
    assert course.load_key(create=True) is not None
    key = course.load_key()
    subs = tmp_path / "submissions"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / ex7.ANSWERS).write_text(workspace.solution(EX)[ex7.ANSWERS])
    bob = ex7.assignment(key, "bob")
    mine = {"seed": bob.seed, "delay_us": bob.delay_us,
            "answers": ex7.answered(ex7.lab_runs(bob))}
    (subs / "bob").mkdir()
    (subs / "bob" / ex7.ANSWERS).write_text(json.dumps(mine))
    out = tmp_path / "grades.json"
    assert main(["grade", "7", "--submission", str(subs), "--json", str(out)]) == 1
    graded = {Path(g["submission"]).name: g for g in json.loads(out.read_text())["submissions"]}
    assert graded["bob"]["full_marks"], graded["bob"]
    assert graded["alice"]["score"] == 0
    form = graded["alice"]["checks"][0]
    assert not form["passed"] and "assigned" in form["expected"]


def test_grading_a_class_without_a_course_key_refuses(course_key: Path, tmp_path: Path,
                                                      capsys) -> None:
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "subs" / "alice" / ex7.ANSWERS).write_text(workspace.solution(EX)[ex7.ANSWERS])
    assert main(["grade", "7", "--submission", str(tmp_path / "subs")]) == 2
    assert "no course key" in capsys.readouterr().err


def test_a_course_key_another_user_can_read_is_refused(course_key: Path) -> None:
    course_key.parent.mkdir()
    course_key.write_bytes(os.urandom(32))
    course_key.chmod(0o644)
    with pytest.raises(course.CourseKeyError, match="0600"):
        course.load_key()
