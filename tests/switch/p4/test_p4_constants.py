"""The P4 source agrees with the Python side without needing p4c.

- every `const` in p4src/include/defines.p4 equals its Python counterpart (wire,
  fabric.topology, p4rt.names) or the spec formula it stands for;
- the control blocks contain no bare numbers other than 0 and 1 (every magic number is a
  named constant);
- every P4Info name in p4rt/names.py is declared in the P4 source.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

import wire
from fabric import topology
from p4rt import names as n

P4SRC = Path(__file__).resolve().parents[3] / "p4src"
DEFINES = P4SRC / "include" / "defines.p4"
CONST_RE = re.compile(r"^const bit<(\d+)>\s+([A-Z0-9_]+)\s*=\s*(0x[0-9A-Fa-f]+|\d+);", re.M)
TYPEDEF_RE = re.compile(r"^typedef bit<(\d+)>\s+(\w+);", re.M)

# Constants that are spec formulas rather than names on the Python side.
DERIVED = {
    "IPPROTO_TCP": socket.IPPROTO_TCP,
    "IP_VERSION_6": 6,
    "TRIMMED_OUTER_PAYLOAD_LEN": wire.TRIMMED_FRAME_LEN - wire.ETH_LEN - wire.IPV6_LEN,
    "TRIMMED_INNER_PAYLOAD_LEN": wire.TRIMMED_FRAME_LEN - wire.ETH_LEN - 2 * wire.IPV6_LEN,
    "TRIMMED_UDP_LEN": wire.TRIMMED_FRAME_LEN - wire.ETH_LEN - 2 * wire.IPV6_LEN,
    "MIN_HOP_LIMIT": 2,  # wire-format.md section 5: arriving with hop limit 0 or 1 drops
}


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def _consts() -> dict[str, tuple[int, int]]:
    text = _strip_comments(DEFINES.read_text())
    return {name: (int(width), int(value, 0)) for width, name, value in CONST_RE.findall(text)}


def _python_value(name: str) -> int:
    if name in DERIVED:
        return DERIVED[name]
    for module in (wire, topology, n):
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"P4 constant {name} has no Python counterpart: add it to "
                         "wire, fabric.topology or p4rt.names")


def test_defines_parse() -> None:
    consts = _consts()
    declared = re.findall(r"^const ", _strip_comments(DEFINES.read_text()), re.M)
    assert len(consts) == len(declared), "a const line in defines.p4 does not match CONST_RE"
    for key in ("ROCE_UDP_PORT", "TRIMMED_FRAME_LEN", "USID_BLOCK", "DSCP_CONTROL"):
        assert key in consts


@pytest.mark.parametrize("name", sorted(_consts()))
def test_constant_matches_python(name: str) -> None:
    width, value = _consts()[name]
    assert value < 1 << width, f"{name}={value} does not fit bit<{width}>"
    assert value == _python_value(name), (
        f"p4src/include/defines.p4 has {name} = {value}, the Python side (wire/layout.py, "
        f"fabric.topology, p4rt.names) says {_python_value(name)}: make them agree")


def test_opcodes_cover_the_data_opcodes() -> None:
    consts = _consts()
    assert {v for k, (_, v) in consts.items() if k.startswith("OP_WRITE")} == \
        set(wire.DATA_OPCODES)


def test_typedef_widths() -> None:
    typedefs = {name: int(width) for width, name in
                TYPEDEF_RE.findall(DEFINES.read_text())}
    assert typedefs["qdepth_t"] == n.QDEPTH_BITS
    assert typedefs["port_num_t"] == n.PORT_BITS
    assert typedefs["mac_addr_t"] == n.MAC_BITS
    assert typedefs["ipv6_addr_t"] == n.DST_ADDR_BITS


@pytest.mark.parametrize("path", ["parser.p4", "ingress.p4", "egress.p4", "deparser.p4"])
def test_no_magic_numbers(path: str) -> None:
    text = _strip_comments((P4SRC / "include" / path).read_text())
    text = re.sub(r"\[\d+:\d+\]", "", text)  # bit slices
    text = re.sub(r"\b\d+w\d+\b", "", text)  # width-typed zero fill
    text = re.sub(r"bit<\d+>", "", text)  # types
    text = re.sub(r"#include \"[^\"]*\"", "", text)
    literals = re.findall(r"\b(?:0x[0-9A-Fa-f]+|\d+)\b", text)
    assert [x for x in literals if x not in ("0", "1")] == []  # flags and the hop decrement


def test_p4_source_declares_every_p4info_name() -> None:
    source = _strip_comments("".join(p.read_text() for p in (P4SRC / "include").glob("*.p4")))

    def local(name: str) -> str:
        return name.rsplit(".", 1)[-1]

    for table in (n.MY_USID_TABLE, n.USID_FWD_TABLE, n.ROUTING_V6_TABLE, n.PORT_CONFIG_TABLE):
        assert re.search(rf"\btable {local(table)}\b", source), table
    for action, params in n.ACTION_PARAMS.items():
        if action == n.NO_ACTION:
            continue
        match = re.search(rf"\baction {local(action)}\(([^)]*)\)", source)
        assert match, action
        declared = re.findall(r"(\w+)\s*(?:,|$)", match.group(1).strip())
        assert declared == [p for p, _ in params], action
    for counter in (*n.DIRECT_COUNTERS, n.DROP_COUNTER, n.TRIM_COUNTER, n.ECN_MARK_COUNTER):
        assert re.search(rf"counter\([^;]*\)\s+{local(counter)};", source), counter
    assert re.search(rf"action_selector\([^;]*\)\s+{local(n.ECMP_SELECTOR)};", source)
    assert re.search(rf"^register<qdepth_t>\(PORT_COUNT\)\s+{n.QUEUE_DEPTH_REGISTER};",
                     source, re.M), "the register must be global (no control prefix)"
    for field in (n.USID_PREFIX, n.DST_ADDR, n.EGRESS_PORT):
        assert f'@name("{field}")' in source, field
