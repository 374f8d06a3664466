"""The field tables (wire/fields.py) are the one statement of every transport header: the
codec's structs come from them, and the dataclasses, the scapy layers, wire.layout's lengths
and the layout blocks of docs/wire-format.md are held to them here, field by field."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from scapy.fields import ThreeBytesField

import wire
from wire import fields as F
from wire import layers as L
from wire import layout

DOC = Path(__file__).resolve().parents[3] / "docs" / "wire-format.md"
SECTIONS = {"BTH": "2.1", "METH": "2.2", "RETH": "2.3", "SACK": "2.6", "CC_STATE": "2.7",
            "NACK": "2.8", "PROBE": "2.9", "PORT_STATUS": "2.10"}
LAYERS = {"BTH": L.MrcBTH, "METH": L.MrcMETH, "RETH": L.MrcRETH, "ImmDt": L.MrcImmDt,
          "SACK": L.MrcSack, "CC_STATE": L.MrcCcState, "NACK": L.MrcNack,
          "PROBE": L.MrcProbe, "PORT_STATUS": L.MrcPortStatus}
DATACLASSES = {"BTH": wire.Bth, "METH": wire.Meth, "RETH": wire.Reth, "SACK": wire.SackExt,
               "CC_STATE": wire.CcState, "NACK": wire.NackExt, "PROBE": wire.ProbeExt,
               "PORT_STATUS": wire.PortStatusExt}
LENGTHS = {"BTH": layout.BTH_LEN, "METH": layout.METH_LEN, "RETH": layout.RETH_LEN,
           "ImmDt": layout.IMM_LEN, "SACK": layout.SACK_LEN, "CC_STATE": layout.CC_STATE_LEN,
           "NACK": layout.NACK_LEN}
SET_BY_CODEC = {"ext_type", "next_ext"}  # an extension's type words: the codec writes them


def layout_block(section: str) -> tuple[int, list[tuple[str, int]]]:
    """(bytes in the heading, [(name, bits)...]) of a §2 header in docs/wire-format.md."""
    text = DOC.read_text()
    m = re.search(rf"^### {re.escape(section)} ([^\n]*)\n\s*```(?:text)?\n(.*?)```", text,
                  re.M | re.S)
    assert m, f"no layout block under '### {section}' in {DOC.name}"
    size = re.search(r"\((\d+) bytes\)", m.group(1))
    assert size, f"'### {section}' gives no size in bytes"
    out = []
    for line in m.group(2).splitlines():
        line = re.sub(r"\s{2,}\(.*\)$", "", line.strip())  # drop notes: "(16)", "(SACK: ...)"
        for part in line.split("|"):
            name, bits = re.fullmatch(r"\s*(.+?)\s+(\d+)\s*", part).groups()
            out.append((name, int(bits)))
    return int(size.group(1)), out


@pytest.mark.parametrize("header", sorted(SECTIONS))
def test_the_docs_draw_each_header_as_its_table(header: str) -> None:
    table = F.HEADERS[header]
    size, drawn = layout_block(SECTIONS[header])
    assert drawn == [(f.doc_name, f.bits) for f in F.fields(table)]
    assert size == F.byte_length(table)


@pytest.mark.parametrize("header", sorted(LAYERS))
def test_each_scapy_layer_declares_its_table(header: str) -> None:
    declared = [(fld.name, fld.size if hasattr(fld, "size")
                 else 24 if isinstance(fld, ThreeBytesField) else 8 * fld.sz)
                for fld in LAYERS[header].fields_desc]
    table = F.fields(F.HEADERS[header])
    assert [bits for _, bits in declared] == [f.bits for f in table]
    for (name, _), f in zip(declared, table, strict=True):
        assert name == f.name or (not f.name and name.startswith("resv")), (name, f)


@pytest.mark.parametrize("header", sorted(DATACLASSES))
def test_each_dataclass_has_its_tables_fields(header: str) -> None:
    named = {f.name for f in F.fields(F.HEADERS[header]) if f.name} - SET_BY_CODEC
    assert {f.name for f in dataclasses.fields(DATACLASSES[header])} == named


@pytest.mark.parametrize("header", sorted(LENGTHS))
def test_layout_lengths_are_the_tables(header: str) -> None:
    assert LENGTHS[header] == F.byte_length(F.HEADERS[header])


def test_every_word_is_a_struct_word() -> None:
    for name, table in F.HEADERS.items():
        for word in table:
            assert sum(f.bits for f in word) in (8, 16, 32, 64), (name, word)
    assert F.struct_format(F.BTH, F.SACK, F.CC_STATE) == "BBHII" + "HhIHHIBBHQ" + "HHI"


def _sample() -> dict[str, object]:
    bth = wire.Bth(wire.OP_SACK, 5, 9)
    return {"bth": bth, "sack": wire.SackExt(1, 0, 2, 0, 0), "cc": wire.CcState()}


@pytest.mark.parametrize("field", [f for f in F.fields(F.SACK) + F.fields(F.CC_STATE)
                                   + F.fields(F.BTH)
                                   if f.name and f.name not in SET_BY_CODEC | {"opcode", "m"}
                                   and f.bits > 1], ids=lambda f: f.name)
def test_a_value_past_its_field_is_refused_by_name(field: F.Field) -> None:
    parts = _sample()
    key = next(k for k, v in parts.items() if hasattr(v, field.name))
    high = (1 << (field.bits - field.signed)) - 1
    parts[key] = dataclasses.replace(parts[key], **{field.name: high})
    wire.encode_packet(wire.SackPacket(**parts))  # the largest value fits
    parts[key] = dataclasses.replace(parts[key], **{field.name: high + 1})
    with pytest.raises(wire.BadField, match=field.name):
        wire.encode_packet(wire.SackPacket(**parts))
