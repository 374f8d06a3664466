"""MRC in Wireshark: a Lua dissector generated from the scapy layers (wire.layers).

    python -m wire.dissector                 print the dissector
    python -m wire.dissector --out FILE      write it (docs/wireshark/mrc.lua is committed)
    python -m wire.dissector --install       into your Wireshark personal Lua plugins folder

Why generated: the layers are the declarative reading of docs/wire-format.md that tests
already hold to the codec's bytes, so every header, field width, opcode and NACK reason
name comes from there and nothing is written a second time by hand; a test keeps the
committed file equal to this output and checks tshark's decoding against the codec.

What Wireshark shows: the BTH of every packet on UDP 4791 (this replaces Wireshark's
InfiniBand/RoCEv2 dissector there, which stops at the standard BTH; with the UDP preference
"Try heuristic sub-dissectors first", `-o udp.try_heuristic_first:TRUE`, also a packet whose
entropy source port is a port another dissector owns: 94 of the 65,536, about 0.14% of EVs,
would show as DNS, NTP and the like without it), then by opcode METH,
RETH and ImmDt of a data packet with its payload, the SACK and CC_STATE extensions, NACK,
PROBE or PORT_STATUS. A data packet also shows its EV (UDP source port and the outer flow
label, wire.ev_from_fields) and whether a switch trimmed it (a trimmed class in the outer
DSCP, a payload shorter than the RETH's dma_len, or an IMM opcode without its ImmDt: as
wire.DataPacket.trimmed says, plus the DSCP).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from scapy.fields import Field, SignedShortField, ThreeBytesField
from scapy.packet import Packet

import wire
from wire import layers
from wire.errors import PacketError

PROTO = "mrc"
# (abbreviation, scapy layer) in the order the dissector may meet them
LAYERS: tuple[tuple[str, type[Packet]], ...] = (
    ("bth", layers.MrcBTH), ("meth", layers.MrcMETH), ("reth", layers.MrcRETH),
    ("imm", layers.MrcImmDt), ("sack", layers.MrcSack), ("cc", layers.MrcCcState),
    ("nack", layers.MrcNack), ("probe", layers.MrcProbe), ("port_status", layers.MrcPortStatus),
)
_UINT = {8: "uint8", 16: "uint16", 24: "uint24", 32: "uint32", 64: "uint64"}


class DissectorError(PacketError, ValueError):
    """A layer the generator cannot express in Lua (a field group that is not byte-aligned)."""


@dataclass(frozen=True)
class LuaField:
    layer: str
    name: str
    bits: int
    shift: int  # bits below this field inside its byte-aligned group
    group_bits: int
    offset: int  # byte offset of its group inside the layer
    signed: bool
    hex: bool
    names: dict[int, str] | None

    @property
    def var(self) -> str:
        return f"f_{self.layer}_{self.name}"

    @property
    def abbrev(self) -> str:
        return f"{PROTO}.{self.layer}.{self.name}"

    def declaration(self) -> str:
        kind = ("int" if self.signed else "uint") + _UINT[self.group_bits][4:]
        base = "base.HEX" if self.hex and not self.names else "base.DEC"
        values = "nil"
        if self.names:
            values = "{" + ", ".join(f"[{k}] = {v!r}".replace("'", '"')
                                     for k, v in sorted(self.names.items())) + "}"
        mask = ""
        if self.bits != self.group_bits:
            mask = f", {((1 << self.bits) - 1) << self.shift:#x}"
        return (f'local {self.var} = ProtoField.{kind}("{self.abbrev}", "{self.name}", '
                f"{base}, {values}{mask})")


def layer_fields(abbrev: str, layer: type[Packet]) -> tuple[list[LuaField], int]:
    """The layer's fields with their places, and its length in bytes."""
    out: list[LuaField] = []
    offset = 0
    pending: list[tuple[Field, int]] = []  # bit fields of the group being gathered
    for fld in layer.fields_desc:
        if _is_bits(fld):
            pending.append((fld, fld.size))
            total = sum(b for _, b in pending)
            if total % 8 == 0:
                if total not in _UINT:
                    raise DissectorError(f"{layer.__name__}: a {total}-bit field group")
                shift = total
                for f, bits in pending:
                    shift -= bits
                    out.append(_field(abbrev, f, bits, shift, total, offset))
                offset += total // 8
                pending = []
            continue
        if pending:
            raise DissectorError(f"{layer.__name__}.{fld.name} follows unaligned bit fields")
        size = 3 if isinstance(fld, ThreeBytesField) else fld.sz  # scapy says 4 (its "!I")
        bits = size * 8
        if bits not in _UINT:
            raise DissectorError(f"{layer.__name__}.{fld.name}: {bits} bits")
        out.append(_field(abbrev, fld, bits, 0, bits, offset))
        offset += size
    if pending:
        raise DissectorError(f"{layer.__name__} ends inside a byte")
    return out, offset


def _is_bits(fld: Field) -> bool:
    """A scapy bit field (BitField, BitEnumField: both carry their width in bits as size)."""
    return hasattr(fld, "tot_size")


def _field(abbrev: str, fld: Field, bits: int, shift: int, group: int, offset: int) -> LuaField:
    names = getattr(fld, "i2s", None)
    return LuaField(abbrev, fld.name, bits, shift, group, offset,
                    signed=isinstance(fld, SignedShortField),
                    hex=type(fld).__name__.startswith("X") or fld.name in ("entropy",),
                    names=dict(names) if names else None)


def _layer_function(abbrev: str, layer: type[Packet], fields: list[LuaField], size: int) -> str:
    lines = [f"local function dissect_{abbrev}(tvb, off, tree)",
             f"    if tvb:len() < off + {size} then return nil end",
             f'    local t = tree:add(mrc, tvb(off, {size}), "{layer.name}")']
    for f in fields:
        lines.append(f"    t:add({f.var}, tvb(off + {f.offset}, {f.group_bits // 8}))")
    lines += [f"    return off + {size}", "end", ""]
    return "\n".join(lines)


def lua_source() -> str:
    """The whole dissector."""
    decls, funcs, names, sizes = [], [], [], {}
    for abbrev, layer in LAYERS:
        fields, size = layer_fields(abbrev, layer)
        sizes[abbrev] = size
        decls += [f.declaration() for f in fields]
        names += [f.var for f in fields]
        funcs.append(_layer_function(abbrev, layer, fields, size))
    opcodes = ", ".join(f'[{v:#x}] = "{n}"' for v, n in sorted(layers.OPCODE_NAMES.items()))
    data = ", ".join(f"[{v:#x}] = true" for v in sorted(wire.DATA_OPCODES))
    imm = ", ".join(f"[{v:#x}] = true" for v in sorted(wire.IMM_OPCODES))
    trimmed = ", ".join(f"[{v}] = true" for v in sorted(wire.TRIMMED_DSCPS))
    head = [
        "-- MRC (Multipath Reliable Connection) dissector for Wireshark.",
        "-- Generated by `python -m wire.dissector` from wire/layers.py: do not edit by hand.",
        "-- Install: python -m wire.dissector --install, or tshark -X lua_script:mrc.lua"
        " -o udp.try_heuristic_first:TRUE",
        f'local mrc = Proto("{PROTO}", "MRC (Multipath Reliable Connection)")',
        *decls,
        f'local f_ev = ProtoField.uint32("{PROTO}.ev", "EV", base.HEX)',
        f'local f_trimmed = ProtoField.bool("{PROTO}.trimmed", "trimmed by a switch")',
        f'local f_payload_len = ProtoField.uint32("{PROTO}.payload_len", "payload bytes")',
        f"mrc.fields = {{{', '.join([*names, 'f_ev', 'f_trimmed', 'f_payload_len'])}}}",
        'local udp_srcport = Field.new("udp.srcport")',
        'local ipv6_flow = Field.new("ipv6.flow")',
        'local ipv6_dscp = Field.new("ipv6.tclass.dscp")',
        f"local TRIMMED_DSCP = {{{trimmed}}}",
        f"local OPCODES = {{{opcodes}}}",
        f"local DATA = {{{data}}}",
        f"local IMM = {{{imm}}}",
        "",
    ]
    body = _DISPATCH.format(
        sack=wire.OP_SACK, nack=wire.OP_NACK, probe=wire.OP_PROBE, ep_req=wire.OP_EP_REQ,
        ep_rsp=wire.OP_EP_RSP, cc=wire.EXT_CC_STATE, port=wire.ROCE_UDP_PORT,
        dma_off=_offset_of("reth", "dma_len"), next_off=_offset_of("sack", "next_ext"),
        next_mask=_mask_of("sack", "next_ext"), next_shift=_shift_of("sack", "next_ext"),
        psn_off=_offset_of("bth", "psn"))
    return "\n".join(head) + "\n" + "\n".join(funcs) + body


def _find(abbrev: str, name: str) -> LuaField:
    layer = dict(LAYERS)[abbrev]
    fields, _ = layer_fields(abbrev, layer)
    return next(f for f in fields if f.name == name)


def _offset_of(abbrev: str, name: str) -> int:
    return _find(abbrev, name).offset


def _mask_of(abbrev: str, name: str) -> str:
    f = _find(abbrev, name)
    return f"{((1 << f.bits) - 1) << f.shift:#x}"


def _shift_of(abbrev: str, name: str) -> int:
    return _find(abbrev, name).shift


_DISPATCH = """
function mrc.dissector(tvb, pinfo, tree)
    local off = dissect_bth(tvb, 0, tree)
    if off == nil then return 0 end
    pinfo.cols.protocol = "MRC"
    local op = tvb(0, 1):uint()
    local info = (OPCODES[op] or string.format("opcode 0x%02x", op))
        .. " psn=" .. tvb({psn_off}, 3):uint()
    if DATA[op] then
        off = dissect_meth(tvb, off, tree)
        local reth = off
        if off then off = dissect_reth(tvb, off, tree) end
        local imm_cut = false
        if off and IMM[op] then  -- a trimmed packet lost its ImmDt with the payload
            local after = dissect_imm(tvb, off, tree)
            if after then off = after else imm_cut = true end
        end
        if off then
            local sport, flows = udp_srcport(), {{ipv6_flow()}}
            if sport and flows[1] then
                local ev = sport.value * 65536 + bit.band(flows[1].value, 0xFFFF)
                tree:add(f_ev, ev):set_generated()
                info = info .. string.format(" ev=0x%08x", ev)
            end
            local payload = tvb:len() - off
            local dscps = {{ipv6_dscp()}}  -- the outer header's first: a switch marks a cut packet
            local trimmed = imm_cut or payload < tvb(reth + {dma_off}, 4):uint()
                or (dscps[1] ~= nil and TRIMMED_DSCP[dscps[1].value] == true)
            tree:add(f_payload_len, payload):set_generated()
            tree:add(f_trimmed, trimmed):set_generated()
            if trimmed then info = info .. " [trimmed]" end
        end
    elseif op == {sack:#x} then
        local sack = off
        off = dissect_sack(tvb, off, tree)
        local word = tvb(sack + {next_off}, 2):uint()
        local nxt = bit.rshift(bit.band(word, {next_mask}), {next_shift})
        if off and nxt == {cc} then off = dissect_cc(tvb, off, tree) end
    elseif op == {nack:#x} then
        off = dissect_nack(tvb, off, tree)
    elseif op == {probe:#x} then
        off = dissect_probe(tvb, off, tree)
    elseif op == {ep_req:#x} or op == {ep_rsp:#x} then
        off = dissect_port_status(tvb, off, tree)
    end
    pinfo.cols.info = info
    return tvb:len()
end

DissectorTable.get("udp.port"):add({port}, mrc)

-- An EV's UDP source port may be one another dissector owns (53, 123, ...), and UDP offers
-- the lower port first. With udp.try_heuristic_first on, this claims every packet to {port}.
local function heuristic(tvb, pinfo, tree)
    if pinfo.dst_port ~= {port} then return false end
    return mrc.dissector(tvb, pinfo, tree) > 0
end
mrc:register_heuristic("udp", heuristic)
"""


def plugin_dir() -> Path:
    """Wireshark's personal Lua plugins folder on Linux (Help > About > Folders); under sudo
    that is root's, so install as the user who runs Wireshark."""
    return Path.home() / ".local" / "lib" / "wireshark" / "plugins"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m wire.dissector", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, help="write the dissector to this file")
    where.add_argument("--install", action="store_true",
                       help="write it into Wireshark's personal Lua plugins folder (run it "
                            "as the user who runs Wireshark, with the project's interpreter: "
                            ".venv/bin/python -m wire.dissector --install)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    source = lua_source()
    if args.install:
        folder = plugin_dir()
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / "mrc.lua"
        target.write_text(source)
        print(f"installed {target}; restart Wireshark (or Analyze > Reload Lua Plugins), and "
              "turn on Preferences > Protocols > UDP > Try heuristic sub-dissectors first")
    elif args.out:
        args.out.write_text(source)
    else:
        sys.stdout.write(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
