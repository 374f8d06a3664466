"""docs/fabric.svg, the README's picture, is what docgen.picture draws from the fabric model:
the committed file is current, and the picture holds every switch, host and path the model has."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from docgen.picture import PICTURE, ROOT, fabric_svg, main, preset_fabric, readme_picture
from fabric.topology import Fabric

SVG = "{http://www.w3.org/2000/svg}"


def readme_case() -> tuple[Fabric, int, int, tuple[str, str]]:
    """The README's transfer, computed here from the model as the demo picks it."""
    fabric = preset_fabric("default")
    src, dst = 0, fabric.hosts - 1
    return fabric, src, dst, (fabric.t0(0, fabric.nic(src, 0).t0).name, fabric.t1(0, 0).name)


def drawn_paths(svg: str) -> list[set[str]]:
    """The class tokens of every element drawn as one of the transfer's paths."""
    classes = (set(e.get("class", "").split()) for e in ET.fromstring(svg).iter())
    return [c for c in classes if "path" in c]


def crossing(fabric: Fabric, src: int, dst: int, failed: tuple[str, str]) -> int:
    return sum(any({a, b} == set(failed) for a, b in fabric.path_links(p))
               for p in fabric.all_paths(src, dst))


def test_committed_picture_is_current() -> None:
    committed = (ROOT / PICTURE).read_text() if (ROOT / PICTURE).is_file() else ""
    assert committed == readme_picture(), f"{PICTURE} is stale: run python -m docgen.picture"


def test_check_option_says_stale_or_current(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("docgen.picture.ROOT", tmp_path)
    assert main(["--check"]) == 1
    assert "docs/fabric.svg is stale: run python -m docgen.picture" in capsys.readouterr().err
    assert main([]) == 0
    assert (tmp_path / PICTURE).read_text() == readme_picture()
    assert main(["--check"]) == 0


def test_picture_is_deterministic_xml() -> None:
    svg = readme_picture()
    assert svg == readme_picture()
    assert ET.fromstring(svg).tag == f"{SVG}svg"


def test_every_switch_and_host_is_named() -> None:
    fabric, *_ = readme_case()
    svg = readme_picture()
    names = [s.name for s in fabric.switches] + [fabric.host_name(h) for h in range(fabric.hosts)]
    missing = [n for n in names if f">{n}</text>" not in svg]
    assert not missing


def test_every_path_of_the_transfer_is_drawn() -> None:
    fabric, src, dst, _ = readme_case()
    assert len(drawn_paths(readme_picture())) == len(fabric.all_paths(src, dst)) == 8


def test_bypassed_are_the_paths_through_the_failed_link() -> None:
    fabric, src, dst, failed = readme_case()
    paths = drawn_paths(readme_picture())
    expected = crossing(fabric, src, dst, failed)
    assert expected == fabric.t0_per_plane - 1  # one spine of one plane: the demo's cut
    assert sum("bypassed" in c for c in paths) == expected
    bypassed_tips = [e.findtext(f"{SVG}title") for e in ET.fromstring(readme_picture()).iter()
                     if "bypassed" in e.get("class", "").split()]
    assert all(f"{failed[0]} - {failed[1]}" in tip for tip in bypassed_tips)


def test_title_counts_come_from_the_model() -> None:
    fabric, src, dst, failed = readme_case()
    title = ET.fromstring(readme_picture()).find(f"{SVG}text").text
    n, k = len(fabric.all_paths(src, dst)), crossing(fabric, src, dst, failed)
    assert f"over {n} paths in {fabric.planes} planes" in title
    assert f"link {failed[0]} - {failed[1]} failed, its {k} path" in title


def test_another_preset_draws_another_picture() -> None:
    fabric = preset_fabric("paths-32")
    dst = fabric.hosts - 1
    failed = (fabric.t0(1, fabric.nic(0, 1).t0).name, fabric.t1(1, 3).name)
    svg = fabric_svg(fabric, 0, dst, failed)
    assert svg != readme_picture()
    paths = drawn_paths(svg)
    assert len(paths) == len(fabric.all_paths(0, dst)) == 32
    assert sum("bypassed" in c for c in paths) == crossing(fabric, 0, dst, failed) == 1
    assert ">p3s7</text>" in svg


def test_a_host_link_can_fail_too() -> None:
    fabric, src, dst, _ = readme_case()
    failed = (fabric.host_name(dst), fabric.t0(2, fabric.nic(dst, 2).t0).name)
    paths = drawn_paths(fabric_svg(fabric, src, dst, failed))
    assert sum("bypassed" in c for c in paths) == fabric.t1_per_plane  # all of plane 2's


@pytest.mark.parametrize("failed", [("p0l0", "p1s0"), ("h0", "p0l1"), ("nope", "p0s0")])
def test_a_link_the_fabric_lacks_is_refused(failed: tuple[str, str]) -> None:
    fabric, src, dst, _ = readme_case()
    with pytest.raises(ValueError, match="no link"):
        fabric_svg(fabric, src, dst, failed)
