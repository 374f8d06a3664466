"""The README's fabric picture (docs/fabric.svg), drawn from the fabric model itself.

The picture is generated rather than drawn by hand so that it cannot drift from the fabric
the code builds: every switch, cable and path in it comes from fabric.topology, and
`python -m docgen.picture --check` (and tests/unit/test_docgen_picture.py) says when the
committed file is stale. The SVG is written as text with coordinates computed from indices and
printed with fixed decimals, no timestamps and no random ids: one model always gives the same
bytes, so a diff of docs/fabric.svg shows only a real change of the fabric.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from xml.sax.saxutils import escape

from fabric.options import SIZES, fabric_from_args
from fabric.topology import ROLE_T0, Fabric
from fabric.topology import Path as Route

ROOT = Path(__file__).resolve().parent.parent
PICTURE = Path("docs/fabric.svg")  # relative to ROOT
README_PRESET = "default"

Point = tuple[float, float]
MIN_WIDTH, MARGIN, LABEL_W, GAP, MIN_SLOT = 960.0, 16.0, 44.0, 14.0, 34.0
LEGEND_Y, PANEL_TOP, PANEL_H = 56.0, 76.0, 240.0
ROW_Y = {"plane": 18.0, "T1": 56.0, "T0": 140.0, "hosts": 216.0}  # below PANEL_TOP
# A colour per plane, none of them the failed link's red; planes beyond eight repeat them.
PLANE_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
                 "#bcbd22")
BYPASSED_LOOK = "stroke-width:2.2;stroke-opacity:0.45;stroke-dasharray:5 4"
STYLE = (".link{stroke:#bbb;stroke-width:1}.panel{fill:#fafafa;stroke:#ddd}"
         ".path{fill:none;stroke-width:3.2;stroke-linejoin:round;stroke-linecap:round}"
         f".path.bypassed{{{BYPASSED_LOOK}}}.cross{{stroke:#d62728;stroke-width:2.6}}"
         ".failed{stroke:#d62728;stroke-width:2.6;stroke-dasharray:6 4}.cross{stroke-linecap:round}"
         ".t1{fill:#e8eef8;stroke:#4a5a75}.t0{fill:#eef5ea;stroke:#4f6b45}"
         ".host{fill:#fff;stroke:#777}.end{stroke:#222;stroke-width:2}"
         "text{font-family:Helvetica,Arial,sans-serif;fill:#222}.small{font-size:12px;fill:#555}"
         ".name{font-size:11px;text-anchor:middle;dominant-baseline:central}"
         ".title{font-size:15px;font-weight:bold}")


def _f(value: float) -> str:
    """One decimal, always: the same coordinate prints the same bytes on every machine."""
    return f"{value:.1f}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _colour(plane: int) -> str:
    return PLANE_COLOURS[plane % len(PLANE_COLOURS)]


@dataclass(frozen=True)
class _Layout:
    """Where everything goes: a panel per plane side by side, T1 on top, T0, then the hosts
    (each host has a NIC in every plane, so every panel shows all of them)."""

    fabric: Fabric

    @cached_property
    def panel_w(self) -> float:
        planes = self.fabric.planes
        fit = (MIN_WIDTH - 2 * MARGIN - LABEL_W - (planes - 1) * GAP) / planes
        widest = max(self.fabric.hosts, self.fabric.t0_per_plane, self.fabric.t1_per_plane)
        return max(fit, MIN_SLOT * widest)  # a big fabric widens the picture

    @cached_property
    def hosts(self) -> dict[str, int]:
        return {self.fabric.host_name(h): h for h in range(self.fabric.hosts)}

    @property
    def size(self) -> Point:
        return self.panel_x(self.fabric.planes) - GAP + MARGIN, PANEL_TOP + PANEL_H + 40.0

    def panel_x(self, plane: int) -> float:
        return MARGIN + LABEL_W + plane * (self.panel_w + GAP)

    def slot(self, count: int) -> float:
        """Horizontal room of one of `count` nodes in a panel's row."""
        return self.panel_w / count

    def xy(self, node: str, plane: int) -> Point:
        """Centre of a switch, or of a host's NIC in `plane`."""
        switch = self.fabric.by_name.get(node)
        if switch is None:
            index, count, row = self.hosts[node], self.fabric.hosts, "hosts"
        else:
            plane, index = switch.plane, switch.index
            count, row = ((self.fabric.t0_per_plane, "T0") if switch.role == ROLE_T0
                          else (self.fabric.t1_per_plane, "T1"))
        return (self.panel_x(plane) + self.slot(count) * (index + 0.5), PANEL_TOP + ROW_Y[row])

    def ends(self, a: str, b: str) -> tuple[Point, Point]:
        """Both ends of cable a - b, a host's in the plane of the switch it is cabled to."""
        plane = self.fabric.by_name[b if b in self.fabric.by_name else a].plane
        return self.xy(a, plane), self.xy(b, plane)


def _line(ends: tuple[Point, Point], cls: str = "", style: str = "") -> str:
    (x1, y1), (x2, y2) = ends
    look = (f' class="{cls}"' if cls else "") + (f' style="{style}"' if style else "")
    return f'<line{look} x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}"/>'


def _text(x: float, y: float, text: str, cls: str, style: str = "") -> str:
    look = f' style="{style}"' if style else ""
    return f'<text class="{cls}" x="{_f(x)}" y="{_f(y)}"{look}>{escape(text)}</text>'


def _box(centre: Point, w: float, h: float, rx: float, cls: str, name: str) -> list[str]:
    x, y = centre
    return [f'<rect class="{cls}" x="{_f(x - w / 2)}" y="{_f(y - h / 2)}" width="{_f(w)}" '
            f'height="{_f(h)}" rx="{_f(rx)}"/>', _text(x, y, name, "name")]


def _crossed_line(ends: tuple[Point, Point]) -> list[str]:
    """A failed cable: red, dashed, a cross in its middle."""
    (x1, y1), (x2, y2) = ends
    mx, my, r = (x1 + x2) / 2, (y1 + y2) / 2, 5.0
    return [_line(ends, "failed"), _line(((mx - r, my - r), (mx + r, my + r)), "cross"),
            _line(((mx - r, my + r), (mx + r, my - r)), "cross")]


def _panels(lay: _Layout) -> list[str]:
    """The planes' backgrounds and names, and the rows' names on the left."""
    out = [_text(MARGIN, PANEL_TOP + ROW_Y[row] + 4, row, "small") for row in ("T1", "T0", "hosts")]
    for p in range(lay.fabric.planes):
        x = lay.panel_x(p)
        out.append(f'<rect class="panel" x="{_f(x)}" y="{_f(PANEL_TOP)}" '
                   f'width="{_f(lay.panel_w)}" height="{_f(PANEL_H)}" rx="6"/>')
        out.append(_text(x + lay.panel_w / 2, PANEL_TOP + ROW_Y["plane"], f"plane {p}", "small",
                         f"text-anchor:middle;font-weight:bold;fill:{_colour(p)}"))
    return out


def _nodes(lay: _Layout, src: int, dst: int) -> list[str]:
    """Every switch and every host's NIC, the transfer's two hosts outlined."""
    fabric, out = lay.fabric, []
    for p in range(fabric.planes):
        rows = [("t1", fabric.t1_per_plane, fabric.t1), ("t0", fabric.t0_per_plane, fabric.t0)]
        for cls, count, switch in rows:
            w = min(46.0, lay.slot(count) - 4)
            for i in range(count):
                name = switch(p, i).name
                out += _box(lay.xy(name, p), w, 22.0, 5.0, cls, name)
        w = min(34.0, lay.slot(fabric.hosts) - 4)
        for h in range(fabric.hosts):
            cls, name = ("host end" if h in (src, dst) else "host"), fabric.host_name(h)
            out += _box(lay.xy(name, p), w, 18.0, 9.0, cls, name)
    return out


def _path(lay: _Layout, path: Route, bypassed: bool) -> str:
    """One route of the transfer, host to host, in its plane's colour; a tooltip says which."""
    nodes = lay.fabric.path_nodes(path)
    points = " ".join(f"{_f(x)},{_f(y)}" for x, y in (lay.xy(n, path.plane) for n in nodes))
    tip = f"plane {path.plane}: {' - '.join(nodes)}" + (" (bypassed)" if bypassed else "")
    return (f'<polyline class="{"path bypassed" if bypassed else "path"}" '
            f'style="stroke:{_colour(path.plane)}" points="{points}">'
            f"<title>{escape(tip)}</title></polyline>")


def _legend(planes: int, src: str, dst: str, failed: tuple[str, str]) -> list[str]:
    """What the three kinds of line mean, in one row under the title: a sample, then words."""
    y, shown = LEGEND_Y, min(planes, len(PLANE_COLOURS))
    entries = [
        (10.0 * shown - 2, lambda x: [_line(((x + 10 * p, y), (x + 10 * p + 8, y)),
                                            style=f"stroke:{_colour(p)};stroke-width:3.2")
                                      for p in range(shown)],
         f"paths of {src} -> {dst}, a colour per plane"),
        (36.0, lambda x: _crossed_line(((x, y), (x + 36, y))),
         f"failed link {failed[0]} - {failed[1]}"),
        (36.0, lambda x: [_line(((x, y), (x + 36, y)),
                                style=f"stroke:{_colour(0)};{BYPASSED_LOOK}")],
         "bypassed path (it crossed the failed link)")]
    x, out = MARGIN + LABEL_W, []
    for width, draw, text in entries:
        out += draw(x)
        out.append(_text(x + width + 6, y + 4, text, "small"))
        x += width + 6 + 5.9 * len(text) + 32  # 5.9 px: a 12 px sans-serif character
    return out


def title_line(fabric: Fabric, src: int, dst: int, failed: tuple[str, str]) -> str:
    """The picture's headline, its figures computed from the model."""
    paths = fabric.all_paths(src, dst)
    bypassed = sum(fabric.crosses(path, *failed) for path in paths)
    planes = len({path.plane for path in paths})
    return (f"one write {fabric.host_name(src)} -> {fabric.host_name(dst)} sprayed over "
            f"{_plural(len(paths), 'path')} in {_plural(planes, 'plane')}; link {failed[0]} - "
            f"{failed[1]} failed, its {_plural(bypassed, 'path')} bypassed")


def fabric_svg(fabric: Fabric, src: int, dst: int, failed: tuple[str, str]) -> str:
    """The fabric, one transfer's paths src -> dst over it and a failed link, as an SVG
    document; ValueError if the hosts or the link are not the fabric's."""
    if src == dst or not (0 <= src < fabric.hosts and 0 <= dst < fabric.hosts):
        raise ValueError(f"src {src} and dst {dst} must be two hosts of 0..{fabric.hosts - 1}")
    if not any({link.a, link.b} == set(failed) for link in fabric.links):
        raise ValueError(f"no link {failed[0]} - {failed[1]} in the fabric")
    lay, paths = _Layout(fabric), fabric.all_paths(src, dst)
    crossed = [fabric.crosses(path, *failed) for path in paths]
    w, h = map(_f, lay.size)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}">',
           "<!-- generated from fabric/topology.py by python -m docgen.picture: do not edit -->",
           f"<style>{STYLE}</style>", f'<rect x="0" y="0" width="{w}" height="{h}" fill="#fff"/>',
           _text(MARGIN, 28.0, title_line(fabric, src, dst, failed), "title")]
    out += _legend(fabric.planes, fabric.host_name(src), fabric.host_name(dst), failed)
    out += _panels(lay)
    out += [_line(lay.ends(link.a, link.b), "link") for link in fabric.links
            if {link.a, link.b} != set(failed)]
    out += [_path(lay, p, True) for p, c in zip(paths, crossed, strict=True) if c]
    out += [_path(lay, p, False) for p, c in zip(paths, crossed, strict=True) if not c]
    out += _crossed_line(lay.ends(*failed))
    out += _nodes(lay, src, dst)
    nics = f"{fabric.nic(src, 0).ifname} to {fabric.nic(src, fabric.planes - 1).ifname}"
    out.append(_text(MARGIN, PANEL_TOP + PANEL_H + 24,
                     f"T1: spine switches, T0: leaf switches. Each host has one NIC per plane "
                     f"({nics}), so every plane shows all "
                     f"{_plural(fabric.hosts, 'host')}.", "small"))
    return "\n".join([*out, "</svg>"]) + "\n"


def preset_fabric(name: str) -> Fabric:
    """The fabric `--fabric NAME` names on every command line (fabric.options, one rule)."""
    return fabric_from_args(argparse.Namespace(fabric=name, **dict.fromkeys(d for d, _ in SIZES)))


def readme_picture() -> str:
    """The README's picture: the default fabric, host 0 to the last host, and the link the
    demo fails (demo.failure.pick_failed_link: plane 0, the source's T0 to spine 0)."""
    fabric = preset_fabric(README_PRESET)
    src, dst = 0, fabric.hosts - 1
    failed = (fabric.t0(0, fabric.nic(src, 0).t0).name, fabric.t1(0, 0).name)
    return fabric_svg(fabric, src, dst, failed)


def main(argv: list[str] | None = None) -> int:
    """Write docs/fabric.svg, or with --check say whether the committed one is current."""
    parser = argparse.ArgumentParser(prog="python -m docgen.picture", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help=f"write nothing; exit 1 if {PICTURE} differs from what the "
                             "fabric model gives now (for CI), 0 if it is current")
    args = parser.parse_args(argv)
    target, wanted = ROOT / PICTURE, readme_picture().encode()
    if args.check:
        if not target.is_file() or target.read_bytes() != wanted:
            print(f"{PICTURE} is stale: run python -m docgen.picture", file=sys.stderr)
            return 1
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(wanted)
    print(f"wrote {PICTURE} ({len(wanted)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
