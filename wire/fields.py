"""Every MRC transport header as one table of data: its words, in wire order, each a run of
fields with their widths. This is the one statement of the layouts in docs/wire-format.md §2.

From a table come the codec's struct formats (struct_format), the largest value of each
field (maximum; the range checks and the fast paths' bounds), the range checks of the
dataclass encoders (check_fields), and the PSN width. The scapy layers (wire/layers.py), the
codec dataclasses (wire/packets.py) and the layout blocks of docs/wire-format.md are tested
against these tables field by field (tests/unit/contracts/test_wire_fields.py), so none can drift.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.frame import BadField, check_bits


@dataclass(frozen=True)
class Field:
    """One field: `name` is the codec dataclass attribute and the scapy field name ("" for
    reserved bits, sent as zero); `doc` the name docs/wire-format.md uses, when it differs."""

    name: str
    bits: int
    signed: bool = False
    doc: str = ""

    @property
    def doc_name(self) -> str:
        return self.doc or self.name or "rsvd"


def rsvd(bits: int) -> Field:
    return Field("", bits)


Word = tuple[Field, ...]  # one struct word: its fields' widths add up to 8, 16, 32 or 64
_FORMAT = {8: "B", 16: "H", 32: "I", 64: "Q"}


def _ext_type() -> tuple[Field, Field]:
    return Field("ext_type", 4, doc="type"), Field("next_ext", 5, doc="next")


PSN = Field("psn", 24, doc="PSN")
BTH: tuple[Word, ...] = (
    (Field("opcode", 8),),
    (Field("se", 1, doc="SE"), Field("migreq", 1, doc="M"), Field("pad", 2), Field("tver", 4)),
    (Field("pkey", 16),),
    (rsvd(8), Field("dest_qp", 24, doc="dest QP")),
    (Field("ack_req", 1, doc="A"), Field("rtx", 1, doc="RTX"), rsvd(6), PSN),
)
METH: tuple[Word, ...] = ((Field("rq_msn", 16),), (Field("msn", 16),))
RETH: tuple[Word, ...] = ((Field("va", 64),), (Field("rkey", 32),), (Field("dma_len", 32),))
IMMDT: tuple[Word, ...] = ((Field("imm", 32),),)
SACK: tuple[Word, ...] = (
    (*_ext_type(), Field("m", 2, doc="M"), rsvd(3), Field("probe_resp", 1), rsvd(1)),
    (Field("ack_psn_offset", 16, signed=True),),
    (Field("entropy", 32),),
    (Field("spdcid", 16),),
    (Field("dpdcid", 16),),
    (rsvd(8), Field("cack_psn", 24)),
    (Field("cc_type", 4), Field("cc_flags", 4)),
    (Field("mpr", 8),),
    (Field("sack_offset", 16),),
    (Field("sack_bitmap", 64),),
)
CC_STATE: tuple[Word, ...] = (
    (Field("tx_ts", 16),),
    (rsvd(1), Field("ooo_count", 15)),
    (Field("restore", 1), Field("rcv_cwnd_pen", 7), Field("rcvd_bytes", 24)),
)
NACK: tuple[Word, ...] = (
    (*_ext_type(), Field("m", 2, doc="M"), rsvd(5)),
    (Field("reason", 8),),
    (rsvd(8),),
    (Field("entropy", 32),),
    (Field("spdcid", 16),),
    (Field("dpdcid", 16),),
    (rsvd(8), Field("nack_psn", 24)),
    (rsvd(8), Field("cack_psn", 24)),
)
PROBE: tuple[Word, ...] = ((*_ext_type(), rsvd(7)), (rsvd(16),), (Field("entropy", 32),))
PORT_STATUS: tuple[Word, ...] = ((*_ext_type(), rsvd(7)), (Field("seq", 16),),
                                 (Field("port_mask", 32),))

# header -> its table, in the order of docs/wire-format.md §2
HEADERS: dict[str, tuple[Word, ...]] = {
    "BTH": BTH, "METH": METH, "RETH": RETH, "ImmDt": IMMDT, "SACK": SACK,
    "CC_STATE": CC_STATE, "NACK": NACK, "PROBE": PROBE, "PORT_STATUS": PORT_STATUS,
}


def fields(header: tuple[Word, ...]) -> tuple[Field, ...]:
    """The header's fields in wire order, reserved ones included."""
    return tuple(f for word in header for f in word)


def byte_length(header: tuple[Word, ...]) -> int:
    return sum(f.bits for f in fields(header)) // 8


def struct_format(*headers: tuple[Word, ...]) -> str:
    """The struct format of the headers' words, in order (without the byte-order mark); a
    word holding one signed field is read signed."""
    out = []
    for header in headers:
        for word in header:
            width = sum(f.bits for f in word)
            char = _FORMAT[width]
            out.append(char.lower() if len(word) == 1 and word[0].signed else char)
    return "".join(out)


def maximum(header: tuple[Word, ...], name: str) -> int:
    """The largest value field `name` holds (signed: the largest positive)."""
    for f in fields(header):
        if f.name == name:
            return (1 << (f.bits - f.signed)) - 1
    raise KeyError(f"no field {name!r} in this header")


def minimum(header: tuple[Word, ...], name: str) -> int:
    for f in fields(header):
        if f.name == name:
            return -(1 << (f.bits - 1)) if f.signed else 0
    raise KeyError(f"no field {name!r} in this header")


def check_fields(prefix: str, obj: object, header: tuple[Word, ...],
                 skip: frozenset[str] = frozenset()) -> None:
    """Raise BadField for the first attribute of `obj` named in `header` whose value does
    not fit its field (`prefix`.name in the message, or the bare name with no prefix);
    reserved fields and `skip` aside."""
    for f in fields(header):
        if not f.name or f.name in skip or not hasattr(obj, f.name):
            continue
        name, value = f"{prefix}.{f.name}" if prefix else f.name, getattr(obj, f.name)
        if not f.signed:
            check_bits(name, value, f.bits)
        elif not -(1 << (f.bits - 1)) <= value < 1 << (f.bits - 1):
            raise BadField(f"{name}={value!r} does not fit in {f.bits} signed bits")
