"""The MRC transport packets as values: BTH opcodes, extension types, NACK reasons, EV advice
and the frozen header and packet dataclasses (docs/wire-format.md). No bytes here: wire.codec
turns these into UDP payloads and back; `import wire` re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.fields import PSN

# What `import wire` re-exports from this module.
__all__ = [
    "DATA_OPCODES", "EXT_CC_STATE", "EXT_NACK", "EXT_PORT_STATUS", "EXT_PROBE", "EXT_SACK",
    "IMM_OPCODES", "M_ALWAYS_SKIP", "M_NONE", "M_SKIP_ONCE", "NACK_BOUNDS_VIOLATION",
    "NACK_NO_BITMAP", "NACK_PSN_OOR_WINDOW", "NACK_RKEY_VIOLATION", "NACK_TRIMMED",
    "NACK_TRIMMED_LASTHOP", "OP_ACK", "OP_EP_REQ", "OP_EP_RSP", "OP_NACK", "OP_PROBE",
    "OP_SACK", "OP_WRITE_FIRST", "OP_WRITE_LAST", "OP_WRITE_LAST_IMM", "OP_WRITE_MIDDLE",
    "OP_WRITE_ONLY", "OP_WRITE_ONLY_IMM", "PSN_BITS", "PSN_MAX", "PSN_MOD", "QPN_ENDPOINT",
    "Bth", "CcState", "DataPacket", "Meth", "NackExt", "NackPacket", "Packet", "PortStatusExt",
    "PortStatusPacket", "ProbeExt", "ProbePacket", "Reth", "SackExt", "SackPacket",
]

OP_WRITE_FIRST = 0xC6
OP_WRITE_MIDDLE = 0xC7
OP_WRITE_LAST = 0xC8
OP_WRITE_LAST_IMM = 0xC9
OP_WRITE_ONLY = 0xCA
OP_WRITE_ONLY_IMM = 0xCB
OP_ACK = 0xD1
OP_EP_REQ = 0xD8
OP_EP_RSP = 0xD9
OP_SACK = 0xDC
OP_NACK = 0xDD
OP_PROBE = 0xDE
DATA_OPCODES = frozenset(range(OP_WRITE_FIRST, OP_WRITE_ONLY_IMM + 1))
IMM_OPCODES = frozenset({OP_WRITE_LAST_IMM, OP_WRITE_ONLY_IMM})

EXT_SACK = 1
EXT_NACK = 2
EXT_CC_STATE = 3
EXT_PROBE = 4
EXT_PORT_STATUS = 5

NACK_TRIMMED = 0x01
NACK_TRIMMED_LASTHOP = 0x02
NACK_NO_BITMAP = 0x06
NACK_PSN_OOR_WINDOW = 0x0B
NACK_RKEY_VIOLATION = 0x20
NACK_BOUNDS_VIOLATION = 0x21

M_NONE = 0
M_SKIP_ONCE = 1
M_ALWAYS_SKIP = 2

QPN_ENDPOINT = 0x2
PSN_BITS = PSN.bits
PSN_MOD = 1 << PSN_BITS
PSN_MAX = PSN_MOD - 1  # the largest PSN


# ---------------------------------------------------------------- headers


@dataclass(frozen=True, slots=True)
class Bth:
    """IBTA BTH; `rtx` is the top reserved bit after A, set on retransmitted data."""

    opcode: int
    dest_qp: int
    psn: int
    ack_req: bool = False
    rtx: bool = False
    se: bool = False
    migreq: bool = True
    pad: int = 0
    tver: int = 0
    pkey: int = 0xFFFF


@dataclass(frozen=True, slots=True)
class Meth:
    msn: int
    rq_msn: int = 0


@dataclass(frozen=True, slots=True)
class Reth:
    """Per-packet placement (not IBTA per-message): va and dma_len describe this payload."""

    va: int
    rkey: int
    dma_len: int


@dataclass(frozen=True, slots=True)
class SackExt:
    """Acked PSN = cack_psn + ack_psn_offset (int16); bitmap bit i = cack_psn + sack_offset + i."""

    cack_psn: int
    ack_psn_offset: int
    entropy: int
    sack_offset: int
    sack_bitmap: int
    m: int = M_NONE
    probe_resp: bool = False
    spdcid: int = 0
    dpdcid: int = 0
    cc_type: int = 1
    cc_flags: int = 0
    mpr: int = 0


@dataclass(frozen=True, slots=True)
class CcState:
    ooo_count: int = 0
    rcvd_bytes: int = 0
    tx_ts: int = 0
    restore: bool = False
    rcv_cwnd_pen: int = 0


@dataclass(frozen=True, slots=True)
class NackExt:
    """cack_psn replaces the secondary layout's tx_ts, so the sender learns the window start."""

    reason: int
    entropy: int
    nack_psn: int
    cack_psn: int
    m: int = M_NONE
    spdcid: int = 0
    dpdcid: int = 0


@dataclass(frozen=True, slots=True)
class ProbeExt:
    entropy: int


@dataclass(frozen=True, slots=True)
class PortStatusExt:
    seq: int
    port_mask: int


# ---------------------------------------------------------------- packets (UDP payloads)


@dataclass(frozen=True, slots=True)
class DataPacket:
    bth: Bth
    meth: Meth
    reth: Reth
    payload: bytes
    imm: int | None = None

    @property
    def trimmed(self) -> bool:
        """True when a switch cut the payload (and the ImmDt, on IMM opcodes)."""
        return len(self.payload) < self.reth.dma_len or (
            self.imm is None and self.bth.opcode in IMM_OPCODES
        )


@dataclass(frozen=True, slots=True)
class SackPacket:
    bth: Bth
    sack: SackExt
    cc: CcState


@dataclass(frozen=True, slots=True)
class NackPacket:
    bth: Bth
    nack: NackExt


@dataclass(frozen=True, slots=True)
class ProbePacket:
    bth: Bth
    probe: ProbeExt


@dataclass(frozen=True, slots=True)
class PortStatusPacket:
    """EP_REQ or EP_RSP, always to QP 0x2."""

    bth: Bth
    status: PortStatusExt


Packet = DataPacket | SackPacket | NackPacket | ProbePacket | PortStatusPacket
