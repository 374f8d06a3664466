"""Runs one exercise's checks inside a grading copy of the project (grader.workspace.grade
starts it there) and writes the results as JSON: the student's modules are the ones this
process imports."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from grader import catalog
from grader.report import Check
from topologies.runstate import terminate_as_interrupt


@dataclass(frozen=True)
class Context:
    root: Path  # the grading copy: the student's files laid over the project
    target: str  # "soft" or "bmv2": the switch the live stages run
    exercise: catalog.Exercise

    @property
    def is_root(self) -> bool:
        return os.geteuid() == 0


def run(number: int, target: str) -> list[Check]:
    ex = catalog.load(number)
    module = importlib.import_module(f"grader.exercises.ex{number}")
    ctx = Context(catalog.ROOT, target, ex)
    try:
        return list(module.grade(ctx))
    except Exception:  # a student's code may raise anything: report it as the failed check
        return [Check(f"ex{number}.crash", "the checks ran to the end", 1, False,
                      observed=traceback.format_exc(limit=8)[-2000:],
                      hint="the traceback shows where your code raised")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("number", type=int)
    p.add_argument("--target", choices=("soft", "bmv2"), required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    terminate_as_interrupt()  # the live stages' networks are stopped on the way out
    checks = run(args.number, args.target)
    Path(args.out).write_text(json.dumps([asdict(c) for c in checks], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
