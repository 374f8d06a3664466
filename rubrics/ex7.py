"""Exercise 7 (lab, no code): measure failures on the simulated fabric and answer in numbers.

The student runs three scenarios of `python -m sim` (clean, link-failure, plane-failure) with
the lab's size on the fabric their answers.json names (a seed and the per-link delay), and
writes six answers into it. The grader runs the same three scenarios on the same fabric in
the grading copy and compares every answer with its own figure, within the question's
tolerance. The simulator is deterministic (the seed fixes every random choice; the figures
do not depend on the machine or on PYTHONHASHSEED), so a correct answer matches to the
rounding the student used; the tolerances only absorb that rounding.

Each student of a class measures their own fabric: the seed and delay are assigned from the
course key and the student's name (grader.course, `./testbed assignment 7`), and grading a
class (`--submission`) holds each answers.json to its student's assignment, so answers cannot
be passed around nor a fabric chosen whose answers one already holds. The checks never show a
figure the grader measured (nor a tolerance from which one follows): a wrong answer is told
its unit and where to read it. Graded alone (a student's own folder, --solution), the fabric
is the one answers.json names.

Checks: measure.form (the file and its answers are usable), then one check per question.
A question left unanswered fails its own check too, with the command that answers it.

No student code runs here: `observe` (in the sandbox) reports the raw text of answers.json
and nothing else, and `judge` (in the grader's own process) parses and validates it, runs
`lab_runs` on the fabric it names with the instructor's own simulator, and compares.
"""

from __future__ import annotations

import functools
import json
import math
import os
import reprlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from grader.report import AFTER_DUE_DATE, Check, CheckSpec, not_run

ANSWERS = "answers.json"
MAX_ANSWERS_BYTES = 64 << 10  # the template is ~0.5 KiB: far more is not an answers file
SIZE = 4_000_000  # bytes per scenario: about a second of wall time each
SCENARIOS = ("clean", "link-failure", "plane-failure")
SEED_RANGE = (1, 999_999)
DELAY_RANGE_US = (0.1, 20.0)  # per-link propagation delay an instructor may assign
ASSIGNED_DELAY_US = (0.5, 10.0)  # the range assignments draw from (0.1 us steps)
SOLUTION_SEED = 1
SOLUTION_DELAY_US = 1.0  # the simulator's default (SimSettings.delay_s)
SENDER = "h0"  # every scenario's single transfer goes from the first host to the last

Runs = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Setup:
    """The given fabric: what answers.json says the student measured."""

    seed: int = SOLUTION_SEED
    delay_us: float = SOLUTION_DELAY_US

    def __str__(self) -> str:
        return f"seed {self.seed}, delay {self.delay_us:g} us"

    def command(self, scenario: str) -> str:
        return (f"python -m sim {scenario} --size {SIZE} --seed {self.seed} "
                f"--link-delay {self.delay_us / 1000:g} --json")


def assignment(key: bytes, student: str, number: int = 7) -> Setup:
    """The fabric `student` is assigned: drawn from the course key and their name."""
    from grader.course import student_rng

    r = student_rng(key, number, student)
    return Setup(seed=r.randint(*SEED_RANGE), delay_us=round(r.uniform(*ASSIGNED_DELAY_US), 1))


def assigned(ctx: Any) -> Setup | None:
    """The judged student's assignment, or None when no class's student is judged."""
    if not ctx.student:
        return None
    from grader.course import CourseKeyError, load_key

    key = load_key()
    if key is None:
        raise CourseKeyError("no course key: hand out assignments first "
                             f"(./testbed assignment {ctx.exercise.number} --roster FILE)")
    return assignment(key, ctx.student, ctx.exercise.number)


@functools.lru_cache(maxsize=4)
def lab_runs(setup: Setup) -> Runs:
    """The lab's three runs, as the student makes them, with the instructor's simulator
    (imported late; `judge` calls this in the grader's own process). Not named `measure`:
    that is grader.judging's hook, which called this with a report. Cached: callers must
    not change the result."""
    from sim.harness import SimSettings
    from sim.scenarios import run_scenario

    settings = SimSettings(seed=setup.seed, delay_s=setup.delay_us * 1e-6)
    return {name: run_scenario(name, size=SIZE, settings=settings) for name in SCENARIOS}


def _plane_share(runs: Runs) -> list[float]:
    counts = runs["link-failure"]["data_tx_per_plane"][SENDER]
    return [c / sum(counts) for c in counts]


def _goodput_vs_clean(runs: Runs) -> float:
    return runs["plane-failure"]["goodput_after_failure_bps"] / runs["clean"]["goodput_bps"]


# ---- hints for the typical mistakes: each returns a sentence when the answer looks like it


def _close(a: float, b: float, rel: float = 0.03) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def _unit_hint(answer: float, value: float, what: str, units: dict[str, float]) -> str:
    for name, factor in units.items():
        if _close(answer, value * factor):
            return f"{answer:g} looks like {what} in {name}"
    return ""


def _base_rtt_hints(answer: float, runs: Runs) -> str:
    rtt_s = runs["link-failure"]["base_rtt_s"]
    unit = _unit_hint(answer, rtt_s, "the base RTT", {"seconds": 1, "milliseconds": 1e3,
                                                       "nanoseconds": 1e9})
    return f"{unit}: give it in microseconds" if unit else ""


def _recovery_hints(answer: float, runs: Runs) -> str:
    r = runs["link-failure"]
    t = r["recovery_rtts"] * r["base_rtt_s"]
    unit = _unit_hint(answer, t, "the time to stop using the failed path",
                      {"seconds": 1, "milliseconds": 1e3, "microseconds": 1e6})
    if unit:
        return (f"{unit}; divide the time by the base RTT (your answer to Q1): the answer "
                f"is a number of base RTTs")
    if r["recovery_rtts"] and _close(answer, r["data_on_failed_path_after_failure"], 0.001):
        return ("that is the number of data packets sent on the failed path after the "
                "failure (data_on_failed_path_after_failure), not the time in base RTTs")
    return ""


def _retired_hints(answer: float, runs: Runs) -> str:
    r = runs["link-failure"]
    if answer == 0 != r["retired_evs"]:
        return ("no EV retired is what the clean and plane-failure runs report: read the "
                "link-failure run's count")
    if answer == r["reinstated_evs"] != r["retired_evs"]:
        return "that is the count of reinstated EVs, not retired ones"
    return ""


def _share_hints(answer: list[float], runs: Runs) -> str:
    good = _plane_share(runs)
    counts = runs["link-failure"]["data_tx_per_plane"][SENDER]
    if all(_close(a, float(c), 0.001) for a, c in zip(answer, counts, strict=True)):
        return "those are packet counts: divide each by their sum"
    if all(_close(a, 100 * g, 0.02) for a, g in zip(answer, good, strict=True)):
        return "those are percentages: give fractions (they sum to 1)"
    if all(_close(a, g, 0.04) for a, g in zip(sorted(answer), sorted(good), strict=True)):
        return (f"the right shares in the wrong order: entry i is plane i, and the failed "
                f"link was on plane 0 (failed_link {runs['link-failure']['failed_link']})")
    tx = runs["link-failure"]["tx_packets_per_plane"][SENDER]
    every = [c / sum(tx) for c in tx]
    if all(abs(a - e) <= 0.01 for a, e in zip(answer, every, strict=True)):
        return ("those shares count every packet the sender sent (probes included): "
                "count data packets only (data_tx_per_plane)")
    if abs(sum(answer) - 1) > 0.02:
        return f"the shares sum to {sum(answer):.3f}, not 1"
    return ""


def _notified_hints(answer: float, runs: Runs) -> str:
    r = runs["plane-failure"]
    t = r["peer_notified_after_rtts"] * r["base_rtt_s"]
    unit = _unit_hint(answer, t, "the notification delay",
                      {"seconds": 1, "milliseconds": 1e3, "microseconds": 1e6})
    if unit:
        return f"{unit}; divide by the base RTT: the answer is a number of base RTTs"
    if _close(answer, r["recovery_rtts"], 0.01) and not _close(answer,
                                                                 r["peer_notified_after_rtts"]):
        return ("that is recovery_rtts (the last data packet on the failed plane), not "
                "peer_notified_after_rtts (when the sender learned of the failure)")
    return ""


def _goodput_hints(answer: float, runs: Runs) -> str:
    p, c = runs["plane-failure"], runs["clean"]
    good = _goodput_vs_clean(runs)
    if _close(answer, 100 * good, 0.01):
        return "that is a percentage: give a fraction"
    if _close(answer, p["goodput_ratio_after_failure"], 0.004):
        return ("that is goodput_ratio_after_failure: the goodput after the failure relative "
                "to the capacity left (3 planes), not to the clean run's goodput")
    if _close(answer, p["goodput_bps"] / c["goodput_bps"], 0.004):
        return ("that divides the plane-failure run's goodput over the whole transfer; the "
                "question asks for the goodput after the failure (goodput_after_failure_bps)")
    planes = p["fabric"]["planes"]
    if _close(answer, (planes - 1) / planes, 0.002):
        return (f"{answer:g} is (planes-1)/planes, what losing one plane of {planes} costs on "
                f"paper; the question asks what the run measured")
    return ""


@dataclass(frozen=True)
class Question:
    key: str  # in answers.json's "answers"
    check_id: str
    title: str
    scenario: str  # the run that answers it
    measured: Callable[[Runs], Any]
    abs_tol: float
    rel_tol: float
    unit: str
    hints: Callable[[Any, Runs], str]
    points: int = 2
    length: int = 0  # a list of this many numbers (0: one number)

    def within(self, answer: float, value: float) -> bool:
        return abs(answer - value) <= max(self.abs_tol, self.rel_tol * abs(value))

    def tolerance(self) -> str:
        """The rule, never its value at the measured figure (which would give the figure)."""
        parts = ([f"{self.rel_tol:.0%} of the measured value"] if self.rel_tol else []) + \
            ([f"{self.abs_tol:g}"] if self.abs_tol else [])
        return "within " + " or ".join(parts) if parts else "exactly"


QUESTIONS = (
    Question("base_rtt_us", "measure.base-rtt", "Q1 the base RTT of the transfer's path",
             "link-failure", lambda r: r["link-failure"]["base_rtt_s"] * 1e6,
             0.0, 0.02, "microseconds", _base_rtt_hints),
    Question("recovery_rtts", "measure.recovery-rtts",
             "Q2 base RTTs from the link failure to the last data packet on the failed path",
             "link-failure", lambda r: r["link-failure"]["recovery_rtts"],
             0.02, 0.02, "base RTTs", _recovery_hints),
    Question("retired_evs", "measure.retired-evs", "Q3 EVs the sender retired after the link "
             "failure", "link-failure", lambda r: r["link-failure"]["retired_evs"],
             0.0, 0.0, "EVs", _retired_hints),
    Question("plane_share", "measure.plane-share", "Q4 each plane's share of the sender's data "
             "packets in the link-failure run", "link-failure", _plane_share,
             0.01, 0.0, "fractions, plane 0 first", _share_hints, length=4),
    Question("peer_notified_rtts", "measure.peer-notified",
             "Q5 base RTTs from the NIC failure until the sender learned of it",
             "plane-failure", lambda r: r["plane-failure"]["peer_notified_after_rtts"],
             0.02, 0.03, "base RTTs", _notified_hints),
    Question("goodput_after_plane_failure_vs_clean", "measure.goodput-vs-clean",
             "Q6 goodput after the plane failure relative to the clean run's goodput",
             "plane-failure", _goodput_vs_clean, 0.006, 0.0, "a fraction of the clean goodput",
             _goodput_hints),
)


def _number(x: Any) -> bool:
    """A finite JSON number that fits a float (the comparisons convert to float)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # an integer beyond any float: 1 followed by 400 zeros
        return False


_SHOWN = reprlib.Repr()  # an unusable answer as observed: bounded in length and depth
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict = 120, 120, 8, 8
_SHOWN.maxlevel = 3


def _problem(q: Question, answer: Any) -> str:
    """Why an answer cannot be compared ('' when it can)."""
    if answer is None or answer == [None] * q.length:
        return "no answer"
    if q.length:
        if not isinstance(answer, list) or len(answer) != q.length or \
                not all(_number(a) for a in answer):
            return f"not a list of {q.length} numbers: {_SHOWN.repr(answer)}"
    elif not _number(answer):
        return f"not a number: {_SHOWN.repr(answer)}"
    return ""


def answered(runs: Runs) -> dict[str, Any]:
    """Every question answered from `runs` (the reference solution's answers)."""
    out = {}
    for q in QUESTIONS:
        v = q.measured(runs)
        out[q.key] = [round(x, 4) for x in v] if q.length else \
            (v if isinstance(v, int) else round(v, 4))
    return out


def solution(_ex: Any) -> dict[str, str]:
    """The lab's reference solution: its own measurement with SOLUTION_SEED, answered."""
    setup = Setup()
    data = {"seed": setup.seed, "delay_us": setup.delay_us, "answers": answered(lab_runs(setup))}
    return {ANSWERS: json.dumps(data, indent=2) + "\n"}


def observe(ctx: Any) -> dict[str, Any]:
    """The submitted answers.json as raw text, and nothing else. A lab runs no student code,
    so there is nothing to watch: the judge parses and validates the text and measures the
    fabric itself, in the trusted process, and a forged report can hand in nothing but
    answers, as the student could. Capped at MAX_ANSWERS_BYTES: a bigger or unreadable file
    is reported by its size or its error instead of its text."""
    path = ctx.root / ANSWERS
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(MAX_ANSWERS_BYTES + 1)
    except OSError as exc:
        return {"text": None, "size": None, "unreadable": exc.strerror or str(exc)}
    if len(data) > MAX_ANSWERS_BYTES:
        return {"text": None, "size": max(size, len(data)), "unreadable": None}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return {"text": None, "size": len(data), "unreadable": f"not UTF-8 text ({exc})"}
    return {"text": text, "size": len(data), "unreadable": None}


def _submitted(obs: dict[str, Any]) -> tuple[str | None, str]:
    """The answers file's text from the (untrusted) observations, or why there is none.
    Wrong types raise TypeError/ValueError: the report is malformed, not the answers (a
    text that is not UTF-8, which observe never reports, raises UnicodeEncodeError)."""
    text = obs["text"]
    if isinstance(text, str):
        size = len(text.encode("utf-8"))  # the cap again: the report is not trusted to obey it
        return (None, _too_big(size)) if size > MAX_ANSWERS_BYTES else (text, "")
    if text is not None:
        raise TypeError(f'"text" is a {type(text).__name__}, not a string or null')
    unreadable, size = obs.get("unreadable"), obs.get("size")
    if isinstance(unreadable, str):
        return None, f"cannot read {ANSWERS}: {unreadable[:300]}"
    if _number(size) and size > MAX_ANSWERS_BYTES:
        return None, _too_big(int(size))
    raise ValueError(f"the report holds neither the text of {ANSWERS} nor why it has none")


def _too_big(size: int) -> str:
    return (f"{ANSWERS} is {size} bytes, over the {MAX_ANSWERS_BYTES >> 10} KiB the grader "
            f"reads (it holds a seed, a delay and six answers)")


def _parse(text: str) -> tuple[dict[str, Any] | None, Setup | None, str]:
    """answers.json's content and the fabric it names, or why they are unusable."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        return None, None, f"{ANSWERS} is not valid JSON: {exc}"
    if not isinstance(data, dict) or not isinstance(data.get("answers"), dict):
        return None, None, f'{ANSWERS} has no "answers" object'
    seed = data.get("seed")
    lo, hi = SEED_RANGE
    if not (isinstance(seed, int) and not isinstance(seed, bool) and lo <= seed <= hi):
        return None, None, f'"seed" is {_SHOWN.repr(seed)}, not an integer in {lo}..{hi}'
    delay = data.get("delay_us", SOLUTION_DELAY_US)
    lo, hi = DELAY_RANGE_US
    if not (_number(delay) and lo <= delay <= hi):
        return None, None, (f'"delay_us" is {_SHOWN.repr(delay)}, not a number of '
                            f"microseconds in {lo}..{hi}")
    return data, Setup(seed, float(delay)), ""


FORM_TITLE = f"{ANSWERS} names the fabric and holds a usable answer to every question"
# The form (a fabric named, every answer a number in its unit and range) is the student's to
# see; whether a figure is right is not before the due date, or repeated tries would find it.
CHECKS = (CheckSpec("measure.form", FORM_TITLE, 1),
          *(CheckSpec(q.check_id, q.title, q.points, AFTER_DUE_DATE) for q in QUESTIONS))


def judge(obs: dict[str, Any], ctx: Any) -> Iterator[Check]:
    """Every check from the submitted text alone: parsed and validated here, and compared
    with the grader's own measurement of the fabric it names (`measure`, in this process)."""
    keys = ", ".join(q.key for q in QUESTIONS)
    expected_form = (f'{{"seed": N, "delay_us": D, "answers": {{{keys}}}}} with numbers '
                     f"(plane_share: 4 numbers)")
    text, error = _submitted(obs)
    data, setup = None, None
    if text is not None:
        data, setup, error = _parse(text)
    if data is None or setup is None:
        yield Check("measure.form", FORM_TITLE, 1, False, expected=expected_form,
                    observed=error, hint="compare it with the template: ./testbed exercise 7 "
                    "--force writes a fresh one (over your answers: copy them first)")
        for q in QUESTIONS:
            yield not_run(q.check_id, q.title, q.points, f"{ANSWERS} is unusable")
        return
    mine = assigned(ctx)
    if mine is not None and mine != setup:
        yield Check("measure.form", FORM_TITLE, 1, False, expected=f"your assigned fabric: "
                    f"{mine}", observed=f"{ANSWERS} names {setup}", hint="measure the fabric "
                    "your instructor assigned you and name it in answers.json")
        for q in QUESTIONS:
            yield not_run(q.check_id, q.title, q.points, "not measured on your assigned fabric")
        return
    answers = data["answers"]
    problems = {q.key: _problem(q, answers.get(q.key)) for q in QUESTIONS}
    bad = {k: p for k, p in problems.items() if p}
    yield Check("measure.form", FORM_TITLE, 1, not bad, expected=expected_form,
                observed="; ".join(f"{k}: {p}" for k, p in bad.items()) or "all answered",
                hint="" if not bad else f"run the three scenarios with {setup} "
                f"(README, Steps) and fill in every answer")
    runs = lab_runs(setup)
    for q in QUESTIONS:
        yield _check(q, answers.get(q.key), problems[q.key], runs, setup)


def _check(q: Question, answer: Any, problem: str, runs: Runs, setup: Setup) -> Check:
    value = q.measured(runs)
    run = f"`{setup.command(q.scenario)}`"
    each = "each " if q.length else ""
    expected = (f"{q.unit}, {each}{q.tolerance()} of what the grader measured on {setup} "
                f"(the figure itself is not shown)")
    if problem:
        return Check(q.check_id, q.title, q.points, False, expected=expected, observed=problem,
                     hint=f"answer it from {run} (README, question {q.title[1]})")
    if q.length:
        ok = all(q.within(a, v) for a, v in zip(answer, value, strict=True))
    else:
        ok = q.within(answer, value)
    if ok:
        return Check(q.check_id, q.title, q.points, True, expected=expected,
                     observed=f"{answer}")
    hint = q.hints(answer, runs) or (
        f"read it again from {run}: check the seed, --link-delay and --size you ran with, and the "
        f"unit ({q.unit})")
    return Check(q.check_id, q.title, q.points, False, expected=expected,
                 observed=f"{answer}", hint=hint)
