"""The sandboxed half of grading: runs one exercise's `observe` inside a grading copy of the
project (grader.workspace starts it there, in sandbox.contain) and writes what it saw as JSON.

This process imports the student's modules, so nothing it writes is believed: it reports raw
observations (frames, counts, entries, transfer results), never verdicts, and the grader's own
process judges them (grader.judging). A crash is reported as such, with its traceback. The
run's challenge (grader.challenge) shapes the scenarios and is named in the report, and the
process ends with os._exit right after writing it, so no exit hook of the student's runs after.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import catalog
from grader.challenge import check
from safety.runstate import terminate_as_interrupt


@dataclass(frozen=True)
class Context:
    root: Path  # the grading copy: the student's files laid over the project
    target: str  # "soft" or "bmv2": the switch the live stages run
    exercise: catalog.Exercise
    challenge: str  # this grading run's (grader.challenge): scenarios derive from it

    @property
    def is_root(self) -> bool:
        return os.geteuid() == 0


def observe(number: int, target: str, challenge: str) -> dict[str, Any]:
    """{"challenge", "observations": ...} from the exercise's `observe`, or {"challenge",
    "crash": traceback}."""
    ex = catalog.load(number)
    module = importlib.import_module(f"rubrics.ex{number}")
    try:
        obs = module.observe(Context(catalog.ROOT, target, ex, challenge))
        return {"challenge": challenge, "observations": obs}
    except Exception:  # a student's code may raise anything: the judge reports it
        return {"challenge": challenge, "crash": traceback.format_exc(limit=8)[-2000:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("number", type=int)
    p.add_argument("--target", choices=("soft", "bmv2"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--challenge", type=check, required=True)
    args = p.parse_args(argv)
    terminate_as_interrupt()  # the live stages' networks are stopped on the way out
    report = observe(args.number, args.target, args.challenge)
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no atexit hook (a submission's) runs after the report is written
