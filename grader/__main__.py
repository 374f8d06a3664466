"""Course exercises: hand out skeletons, grade submissions.

    python -m grader list
    python -m grader exercise N [--force]        skeleton -> exercises/work/NN-slug/
    python -m grader solution N DIR              the reference solution's files -> DIR
    python -m grader grade N [--submission DIR | --skeleton | --solution | --wrong NAME]
                             [--target auto|bmv2|soft] [--json [FILE]] [--csv FILE]
                             [--gradescope DIR] [--feedback DIR [--after-due-date]]
                             [--jobs N] [--resume] [--timeout S] [--trust-submissions]
    python -m grader check N [--submission DIR] [--target ...]   the student's own loop
    python -m grader assignment N (--student NAME ... | --roster FILE)   instructor: CSV
    python -m grader classroom student-edition DIR [--exercises 1,4,5] | collect SRC DEST |
                               waiting

Exit status of grade: 0 every submission got full marks; 1 all were graded (or could not
be read: the student's error) and some got less; 2 the command was wrong; 3 the grader itself
failed on some submission (no sandbox here, a crash of ours): those grades say nothing.

Each submission runs in a sandbox (sandbox.contain: bubblewrap, an unprivileged uid, limits);
where none can be had, grading refuses unless --trust-submissions says the code is trusted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from fabric.options import add_json_arg, add_target_arg, output_path, resolve_target, write_json
from grader import (
    batch,
    catalog,
    classroom,
    course,
    edition,
    feedback,
    gradebook,
    judging,
    livelogs,
    regions,
    workspace,
)
from grader.errors import GraderError
from grader.report import Grade, render, summary
from safety.errors import SafetyError
from safety.privdir import check_workdir
from sandbox import contain
from sandbox.errors import ContainmentError


def cmd_list(_args: argparse.Namespace) -> int:
    for ex in catalog.load_all():
        lo, hi = ex.minutes
        print(f"{ex.number}  {ex.title}  [{ex.kind}, {lo}-{hi} min]  {ex.folder.name}/README.md")
    return 0


def cmd_exercise(args: argparse.Namespace) -> int:
    ex = catalog.load(args.number)
    dest = workspace.working_folder(ex)
    if edition.in_place(ex):
        missing = {rel: text for rel, text in workspace.skeleton(ex).items()
                   if not os.path.lexists(dest / rel)}  # a lab's answers.json, at first
        workspace.write(missing, dest)
        print(f"exercise {ex.number}: {ex.title}\n  read {ex.folder.relative_to(catalog.ROOT)}/"
              f"README.md\n  in this student edition the exercise is in the project itself: "
              f"edit (look for TODO):")
        print("\n".join(f"    {rel}" for rel in ex.files))
        print(f"  then: sudo ./testbed check {ex.number}; commit and push to hand in")
        return 0
    existing = [rel for rel in ex.files if (dest / rel).exists()]
    if existing and not args.force:
        print(f"{dest} already holds your work on {', '.join(existing)}: grade it with "
              f"sudo ./testbed grade {ex.number}, or start over with --force", file=sys.stderr)
        return 1
    paths = workspace.write(workspace.skeleton(ex), dest)
    print(f"exercise {ex.number}: {ex.title}\n  read {ex.folder.relative_to(catalog.ROOT)}/"
          f"README.md\n  edit (look for TODO):")
    for path in paths:
        print(f"    {path.relative_to(catalog.ROOT)}")
    print(f"  then: sudo ./testbed grade {ex.number}")
    return 0


def cmd_solution(args: argparse.Namespace) -> int:
    edition.refuse_in_edition("./testbed solution")
    ex = catalog.load(args.number)
    dest = Path(args.dest)
    if os.geteuid() == 0:  # root writes there: DEST must be root's own (made 0700 if missing),
        check_workdir(dest)  # or a link planted in it would steer the files anywhere
    for path in workspace.write(workspace.solution(ex), dest):
        print(path)
    return 0


Submission = batch.Submission
EXIT_BELOW_FULL, EXIT_GRADER_FAILED = 1, 3


def _to_grade(ex: catalog.Exercise, args: argparse.Namespace) -> list[Submission]:
    """(name, student, files) per submission (student: the folder's name when a class is
    graded with --submission, else ''); a submission that cannot be read is (name, student,
    its error), so one student's folder never stops the others' grading."""
    if args.skeleton:
        return [("skeleton", "", workspace.skeleton(ex))]
    if args.solution or args.wrong:
        edition.refuse_in_edition("grading the reference (--solution, --wrong)")
    if args.solution:
        return [("solution", "", workspace.solution(ex))]
    if args.wrong:
        match = [w for w in ex.wrong_solutions() if w.name == args.wrong]
        if not match:
            names = ", ".join(w.name for w in ex.wrong_solutions()) or "none"
            raise workspace.SubmissionError(f"no wrong solution {args.wrong!r} (there are: "
                                            f"{names})")
        return [(f"wrong/{args.wrong}", "", workspace.fixture(ex, match[0]))]
    folder = Path(args.submission) if args.submission else workspace.working_folder(ex)
    if not args.submission and not folder.exists():
        raise workspace.SubmissionError(f"{folder} does not exist: start the exercise with "
                                        f"./testbed exercise {ex.number}")
    out: list[Submission] = []
    in_place = not args.submission and edition.in_place(ex)  # the edition itself: one
    for sub in [folder] if in_place else workspace.submissions(ex, folder):
        student = sub.name if args.submission and args.run is cmd_grade else ""
        try:
            out.append((str(sub), student, edition.graft(ex, workspace.read(ex, sub))))
        except (workspace.SubmissionError, regions.RegionError) as exc:
            out.append((str(sub), student, exc))
    return out


def cmd_grade(args: argparse.Namespace) -> int:
    ex = catalog.load(args.number)
    target = "soft" if ex.kind == "lab" else resolve_target(args.target)  # a lab runs none
    todo = _to_grade(ex, args)
    if any(student for _, student, _ in todo) and _assigns(ex) and course.load_key() is None:
        raise course.CourseKeyError(
            f"exercise {ex.number} assigns each student a fabric, and there is no course key "
            f"({course.key_path()}): hand out assignments first (./testbed assignment "
            f"{ex.number} --roster FILE), then grade")
    began, count = time.monotonic(), 0

    def done(i: int, grade: Grade, cached: bool) -> None:
        nonlocal count
        count += 1
        print(render(grade) if args.run is cmd_grade else feedback.student_text(grade),
              flush=True)
        if len(todo) > 1:
            print(batch.progress(count, len(todo), todo[i][1] or todo[i][0], grade, began,
                                 cached), file=sys.stderr, flush=True)
    timeout_s = getattr(args, "timeout", None)
    cache = batch.GradeCache(ex, target, timeout_s) if getattr(args, "resume", False) else None
    grades = batch.grade_all(ex, todo, target, args.trust_submissions,
                             jobs=getattr(args, "jobs", 1), cache=cache, done=done,
                             timeout_s=timeout_s)
    grader_failed = any(g.error and not isinstance(files, Exception)
                        for g, (_, _, files) in zip(grades, todo, strict=True))
    if args.run is cmd_check:
        _keep_live_logs(todo, grades)
        note = edition.waiting_note(ex)
        if note:
            print(f"note: {note}")
        return 0 if grades and not any(g.error for g in grades) and all(
            c.passed for g in grades for c in g.checks if feedback.shown(c, False)) else 1
    if args.csv is not None:
        gradebook.write_csv(args.csv, [(student or name, g) for (name, student, _), g
                                       in zip(todo, grades, strict=True)], judging.specs(ex))
    for dest, gradescope in ((args.gradescope, True), (args.feedback, False)):
        if dest is not None:
            feedback.write_all(Path(dest), [(student, g) for (_, student, _), g in
                                            zip(todo, grades, strict=True)],
                               gradescope=gradescope, after_due=args.after_due_date)
    if args.json is not None:
        data = summary(grades) if len(grades) > 1 or args.submission else grades[0].to_json()
        write_json(args.json, data)
    if not (args.skeleton or args.solution or args.wrong):
        _keep_live_logs(todo, grades)  # last: a folder that refuses them costs no output
    if grader_failed:
        return EXIT_GRADER_FAILED
    return 0 if grades and all(g.full_marks for g in grades) else EXIT_BELOW_FULL


def _keep_live_logs(todo: list[Submission], grades: list[Grade]) -> None:
    """A failed live stage's logs into each submission folder's results/live/ (livelogs); a
    folder that refuses them is said on stderr and costs nobody their grade."""
    for (name, _, _), grade in zip(todo, grades, strict=True):
        logs = feedback.visible_logs(grade)
        if logs:
            try:
                livelogs.write_into(Path(name), logs)
            except (OSError, ValueError) as exc:
                print(f"testbed: {name}: the live stage's logs were not kept: {exc}",
                      file=sys.stderr)


def cmd_check(args: argparse.Namespace) -> int:
    """The student's loop: their work graded, shown as they may see it (grader.feedback):
    exit 0 when every check shown passes."""
    return cmd_grade(args)


def _assigns(ex: catalog.Exercise) -> bool:
    """Whether exercise `ex` gives each student an assignment of their own (ex7's fabric)."""
    return hasattr(judging.module(ex), "assignment")


def cmd_assignment(args: argparse.Namespace) -> int:
    """Each student's assignment, as CSV (student,seed,delay_us), made from the course key
    (created on first use): for the instructor to hand out."""
    ex = catalog.load(args.number)
    if not _assigns(ex):
        print(f"testbed: exercise {ex.number} gives no per-student assignment",
              file=sys.stderr)
        return 2
    names = list(args.student or [])
    if args.roster:
        text = Path(args.roster).read_text()
        names += [n.strip() for n in text.splitlines() if n.strip() and not n.startswith("#")]
    if not names:
        print("testbed: name students with --student NAME or --roster FILE", file=sys.stderr)
        return 2
    key = course.load_key(create=True)
    print("student,seed,delay_us")
    for name in names:
        setup = judging.module(ex).assignment(key, name, ex.number)
        print(f"{name},{setup.seed},{setup.delay_us:g}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list").set_defaults(run=cmd_list)
    e = sub.add_parser("exercise", help="copy exercise N's skeleton into exercises/work/")
    e.add_argument("number", type=int, help="the exercise (./testbed list)")
    e.add_argument("--force", action="store_true", help="overwrite your work in progress")
    e.set_defaults(run=cmd_exercise)
    s = sub.add_parser("solution", help="write exercise N's reference solution into DEST")
    s.add_argument("number", type=int, help="the exercise (./testbed list)")
    s.add_argument("dest", help="a new (or empty) folder")
    s.set_defaults(run=cmd_solution)
    a = sub.add_parser("assignment", help="each student's assignment for exercise N (the "
                       "instructor's, from the course key): CSV student,seed,delay_us")
    a.add_argument("number", type=int, help="the exercise (./testbed list)")
    a.add_argument("--student", action="append", help="a student's name: their submission "
                   "folder's (repeat for more)")
    a.add_argument("--roster", help="a file of student names, one per line")
    a.set_defaults(run=cmd_assignment)
    g = sub.add_parser("grade", help="grade exercise N")
    g.add_argument("number", type=int, help="the exercise (./testbed list)")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--submission", help="a submission folder, or a folder of them")
    which.add_argument("--skeleton", action="store_true", help="grade the untouched skeleton")
    which.add_argument("--solution", action="store_true", help="grade the reference solution")
    which.add_argument("--wrong", metavar="NAME", help="grade a wrong-solution fixture")
    add_target_arg(g)
    add_json_arg(g)
    g.add_argument("--csv", metavar="FILE", type=output_path, help="the gradebook: one row "
                   "per student (status, score, points per check; grader/gradebook.py)")
    g.add_argument("--gradescope", metavar="DIR", help="Gradescope's results.json per "
                   "submission, into DIR/STUDENT/ (DIR itself for one submission)")
    g.add_argument("--feedback", metavar="DIR", help="what each student may see, as "
                   "DIR/STUDENT/feedback.md")
    g.add_argument("--after-due-date", action="store_true", help="--feedback shows the "
                   "checks held back until the due date too")
    g.add_argument("--jobs", type=_jobs, default=1, metavar="N", help="grade N submissions at "
                   "once, each in its own process and sandbox uid (at most the machine's "
                   "cores; default 1)")
    g.add_argument("--timeout", type=float, metavar="S", help="stop one submission's checks "
                   f"after S seconds (default {workspace.CHECKS_TIMEOUT_S})")
    g.add_argument("--resume", action="store_true", help="reuse the grade of a submission "
                   "already graded, unchanged, by this same grader (an interrupted class "
                   "goes on where it stopped)")
    _trust_arg(g)
    g.set_defaults(run=cmd_grade)
    c = sub.add_parser("check", help="check your work on exercise N, as a student sees it "
                       "(no expected values; some checks are shown after the due date)")
    c.add_argument("number", type=int, help="the exercise (./testbed list)")
    c.add_argument("--submission", help="your work's folder (default: exercises/work/...)")
    add_target_arg(c)
    _trust_arg(c)
    c.set_defaults(run=cmd_check, skeleton=False, solution=False, wrong=None, json=None)
    classroom.add_parser(sub)
    return p


def _jobs(text: str) -> int:
    cores = os.cpu_count() or 1
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of jobs") from None
    if not 1 <= jobs <= min(cores, contain.MAX_SLOTS):
        raise argparse.ArgumentTypeError(f"--jobs {jobs}: give 1 to {cores} (this machine's "
                                         f"cores)")
    return jobs


def _trust_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust-submissions", action="store_true",
                   help="grade without the sandbox (where it cannot run): the submissions' "
                        "code then runs with this process's privileges")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (GraderError, SafetyError, ContainmentError) as exc:  # each unit's base: refused
        print(f"testbed: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
