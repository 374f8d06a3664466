"""Region markers: how an exercise's part is fenced inside the project's real source.

    // BEGIN exercise 1 shift            (P4)        # BEGIN exercise 4 choose-ev   (Python)
    ... the project's code: the reference solution ...
    // END exercise 1 shift                          # END exercise 4 choose-ev

Why markers rather than a copied skeleton and solution: the skeleton is cut from the code as
it stands, so it cannot drift from it, and the solution is the code the test suite already
holds to its specification. A skeleton replaces each region's body by the exercise's stub
(exercises/NN-*/stubs/REGION), re-indented to the marker's indentation; a wrong-solution
fixture replaces it by a deliberately broken body (exercises/NN-*/wrong/NAME/REGION).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from grader.errors import GraderError

_MARK = re.compile(r"^(?P<indent>[ \t]*)(?://|#)\s*(?P<kind>BEGIN|END) exercise "
                   r"(?P<number>\d+) (?P<name>[a-z0-9-]+)\s*$")


class RegionError(GraderError, ValueError):
    """Markers that do not pair up, or a region asked for that the file does not have."""


@dataclass(frozen=True)
class Region:
    number: int
    name: str
    indent: str
    begin: int  # line index of the BEGIN marker
    end: int  # line index of the END marker


def find(text: str, where: str = "<text>") -> list[Region]:
    """Every region in `text`, in order; markers must pair up and not nest."""
    regions: list[Region] = []
    open_: tuple[int, str, str, int] | None = None
    for i, line in enumerate(text.splitlines()):
        m = _MARK.match(line)
        if m is None:
            continue
        number, name, indent = int(m["number"]), m["name"], m["indent"]
        if m["kind"] == "BEGIN":
            if open_ is not None:
                raise RegionError(f"{where}:{i + 1}: BEGIN exercise {number} {name} inside "
                                  f"region {open_[1]} opened on line {open_[3] + 1}")
            open_ = (number, name, indent, i)
        else:
            if open_ is None or open_[:2] != (number, name):
                raise RegionError(f"{where}:{i + 1}: END exercise {number} {name} without "
                                  f"its BEGIN")
            regions.append(Region(number, name, open_[2], open_[3], i))
            open_ = None
    if open_ is not None:
        raise RegionError(f"{where}:{open_[3] + 1}: BEGIN exercise {open_[0]} {open_[1]} is "
                          f"never closed")
    return regions


def body(text: str, number: int, name: str) -> str:
    """The code inside one region (the reference solution's part), dedented to the marker."""
    lines = text.splitlines()
    region = _one(find(text), number, name)
    inner = lines[region.begin + 1:region.end]
    return "".join(_dedent(line, region.indent) + "\n" for line in inner)


def replace(text: str, number: int, bodies: Mapping[str, str], where: str = "<text>") -> str:
    """`text` with the bodies of exercise `number`'s regions named in `bodies` replaced
    (markers kept, so a student sees where the part goes and a second cut finds it again)."""
    regions = [r for r in find(text, where) if r.number == number]
    missing = set(bodies) - {r.name for r in regions}
    if missing:
        raise RegionError(f"{where}: no region {sorted(missing)} of exercise {number}")
    lines = text.splitlines(keepends=True)
    for region in reversed(regions):  # from the end, so earlier line numbers stay valid
        if region.name not in bodies:
            continue
        new = [(region.indent + line if line.strip() else line) + "\n"
               for line in bodies[region.name].splitlines()]
        lines[region.begin + 1:region.end] = new
    return "".join(lines)


def _one(regions: list[Region], number: int, name: str) -> Region:
    for r in regions:
        if (r.number, r.name) == (number, name):
            return r
    raise RegionError(f"no region {name} of exercise {number}")


def _dedent(line: str, indent: str) -> str:
    return line[len(indent):] if line.startswith(indent) else line.lstrip(" \t")
