"""Per-grading challenges: what makes one grading run's observations unusable in another.

Each grading run draws a fresh challenge from `secrets` and hands it to the sandbox. The
report must name it (a report from another run, replayed by a submission, is refused whole),
and the exercises derive their scenarios from it (EV tags, PSNs, queue pair numbers, fabric
shapes): the records a correct solution produces for one challenge are wrong for another, and
the judge, which knows the challenge and never reads it from the report, holds them to this
run's scenario. See docs/security.md ("Grades a submission cannot replay").
"""

from __future__ import annotations

import hashlib
import random
import re
import secrets

from grader.errors import GraderError

_FORM = re.compile(r"^[0-9a-f]{32}$")


class ChallengeError(GraderError, ValueError):
    """Not a challenge this module made."""


def new() -> str:
    """128 bits from the OS's cryptographic source, as hex."""
    return secrets.token_hex(16)


def check(challenge: str) -> str:
    if not isinstance(challenge, str) or not _FORM.match(challenge):
        raise ChallengeError(f"a challenge is 32 hex digits, not {challenge!r:.60}")
    return challenge


def rng(challenge: str, purpose: str) -> random.Random:
    """A generator for one purpose of one run: the same challenge and purpose give the same
    draws in the sandbox (which builds the scenario) and in the judge (which checks it)."""
    digest = hashlib.sha256(f"mrc-grade:{purpose}:{check(challenge)}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))
