"""Region markers: pairing, cutting and errors that name the line."""

from __future__ import annotations

import pytest

from grader import regions

P4 = """control C() {
    apply {
        // BEGIN exercise 1 shift
        hdr.a = hdr.a << 16;
        if (x) {
            y();
        }
        // END exercise 1 shift
        z();
    }
}
"""


def test_find_and_body_dedent_to_the_marker() -> None:
    (r,) = regions.find(P4)
    assert (r.number, r.name, r.indent, r.begin, r.end) == (1, "shift", "        ", 2, 7)
    assert regions.body(P4, 1, "shift") == "hdr.a = hdr.a << 16;\nif (x) {\n    y();\n}\n"


def test_replace_reindents_and_keeps_markers() -> None:
    out = regions.replace(P4, 1, {"shift": "// TODO: shift\n\nhdr.a = hdr.a;\n"})
    pad = " " * 8
    assert out.splitlines()[2:7] == [pad + "// BEGIN exercise 1 shift", pad + "// TODO: shift", "",
                                     pad + "hdr.a = hdr.a;", pad + "// END exercise 1 shift"]
    assert regions.body(out, 1, "shift") == "// TODO: shift\n\nhdr.a = hdr.a;\n"
    assert regions.replace(P4, 1, {"shift": regions.body(P4, 1, "shift")}) == P4


def test_python_markers_and_other_exercises_untouched() -> None:
    py = "def f():\n    # BEGIN exercise 4 a\n    return 1\n    # END exercise 4 a\n" \
         "# BEGIN exercise 5 b\nX = 2\n# END exercise 5 b\n"
    out = regions.replace(py, 4, {"a": "raise NotImplementedError('TODO')\n"})
    assert "    raise NotImplementedError('TODO')\n" in out and "X = 2\n" in out


@pytest.mark.parametrize("text, message", [
    ("# BEGIN exercise 1 a\n", "never closed"),
    ("# END exercise 1 a\n", "without its BEGIN"),
    ("# BEGIN exercise 1 a\n# BEGIN exercise 1 b\n# END exercise 1 b\n", "inside region a"),
])
def test_unpaired_markers_are_errors_with_lines(text: str, message: str) -> None:
    with pytest.raises(regions.RegionError, match=message):
        regions.find(text, "f.py")


def test_replace_unknown_region_is_an_error() -> None:
    with pytest.raises(regions.RegionError, match="no region"):
        regions.replace(P4, 1, {"nope": "x\n"})
