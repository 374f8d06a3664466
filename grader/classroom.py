"""The instructor's course commands, around grading:

    ./testbed classroom student-edition DIR [--exercises 1,4,5]   (grader.edition)
    ./testbed classroom collect SOURCE DEST                       (grader.collect)
    ./testbed classroom waiting        the student: what the edition still waits for

A course runs: make the student edition and publish it as a template repository; students
work and run `./testbed check N`; collect their archives or repositories into one folder per
student; `sudo ./testbed grade N --submission DEST --jobs 2 --csv ... --feedback ...`
(docs/teaching.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader import catalog, collect, edition


def _numbers(text: str) -> list[int]:
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give exercise numbers as 1,4,5") from None
    known = {ex.number for ex in catalog.load_all()}
    unknown = sorted(set(numbers) - known)
    if unknown or not numbers:
        raise argparse.ArgumentTypeError(f"no exercise {unknown or text!r}: the exercises are "
                                         f"{', '.join(map(str, sorted(known)))}")
    return numbers


def cmd_student_edition(args: argparse.Namespace) -> int:
    numbers = args.exercises or [ex.number for ex in catalog.load_all()]
    dest = Path(args.dest)
    files = edition.write(dest, numbers)
    print(f"student edition of exercises {', '.join(map(str, sorted(set(numbers))))}: "
          f"{len(files)} files in {dest} (a git repository with one commit)\n"
          f"  publish it, e.g.: cd {dest} && git remote add origin URL && git push -u origin "
          f"main\n  (on GitHub, mark the repository a template; students start from it)")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    try:
        results = collect.collect(Path(args.source), Path(args.dest))
    except OSError as exc:  # the run's own folders: SOURCE missing, DEST not new or not ours
        print(f"testbed: {exc}", file=sys.stderr)
        return 2
    print(collect.write_report(results))
    refused = sum(1 for r in results if r.error)
    print(f"{len(results) - refused} collected, {refused} refused, into {args.dest}: grade "
          f"them with sudo ./testbed grade N --submission {args.dest}", file=sys.stderr)
    return 0 if results else 1


def cmd_waiting(args: argparse.Namespace) -> int:
    """What the student edition still waits for: exit 1 while a chosen exercise's region
    holds its stub (the demo runs the student's code: `./testbed demo` asks this first)."""
    left = edition.waiting()
    if not left:
        if args.before:
            return 0
        print("nothing waits: every region here holds code (or this is the instructor's "
              "project)")
        return 0
    for number, files in sorted(left.items()):
        print(f"exercise {number}: {', '.join(files)} still hold(s) its stub "
              f"(./testbed exercise {number}, then sudo ./testbed check {number})")
    if args.before == "demo":
        print("the demo runs your code on every switch and host, so it waits for these "
              "exercises; the tests that do not need them run now: ./testbed test",
              file=sys.stderr)
    return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("classroom", help="instructor: make the student edition, collect the "
                       "hand-ins")
    verbs = c.add_subparsers(dest="verb", required=True)
    e = verbs.add_parser("student-edition", help="write a copy of the project for students: "
                         "the chosen exercises cut to their stubs, no solutions")
    e.add_argument("dest", help="a new (or empty) folder")
    e.add_argument("--exercises", type=_numbers, help="which exercises to cut, e.g. 1,4,5 "
                   "(default: all)")
    e.set_defaults(run=cmd_student_edition)
    k = verbs.add_parser("collect", help="per-student archives (zip, tar) or git repositories "
                         "in SOURCE -> one folder per student in DEST, for grade --submission")
    k.add_argument("source", help="a folder of the hand-ins: archives or git repositories")
    k.add_argument("dest", help="a new (or empty) folder")
    k.set_defaults(run=cmd_collect)
    w = verbs.add_parser("waiting", help="student: which exercises this edition still waits "
                         "for (exit 1 while any region holds its stub)")
    w.add_argument("--before", choices=("demo",), help=argparse.SUPPRESS)
    w.set_defaults(run=cmd_waiting)
