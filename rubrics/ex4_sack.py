"""Exercise 4's SACK checks, judged in the grader's process: SCRIPT (rubrics.ex4_observe)
replayed on a correct receiver's state gives the right SACK for each arrival, and each SACK the
student's Receiver._sack sent is held to it (sack.cack, sack.fields, sack.bitmap, sack.far).
rubrics.ex4.judge calls `sack_checks` with the exercise's check specs."""

from __future__ import annotations

from typing import Any

import wire
from grader.report import Check, CheckSpec
from rubrics.ex4_observe import SCRIPT, WINDOW, Row, Scenario

FAR = 64  # a trigger more than this above cack is the sack.far check's
PAYLOAD = 8  # bytes per data packet of SCRIPT
Verdict = tuple[bool, str, str, str]  # passed, expected, observed, hint when it failed


def _truth(sc: Scenario) -> list[Row]:
    """This run's script (sc.script) replayed on a correct receiver's state: per arrival, the
    cumulative ack (as an offset from sc.start), the PSNs held above it and the bytes
    received, after the arrival; each row carries the scenario."""
    rows: list[Row] = []
    received: set[int] = set()  # offsets from START
    cack = rcvd = 0
    for step, (k, ev, ce) in enumerate(sc.script):
        rel = k - cack
        if k not in received and 0 <= rel < WINDOW:
            received.add(k)
            rcvd += PAYLOAD
            while cack in received:
                cack += 1
        rows.append({"step": step, "k": k, "psn": (sc.start + k) % wire.PSN_MOD, "ev": ev,
                     "ce": ce, "sc": sc, "rel": rel, "cack": cack,
                     "above": {x for x in received if x >= cack}, "rcvd": rcvd})
    return rows


def _is_sack(got: Any) -> bool:
    """Whether a SACK record holds a SACK (not a NACK); refuses a record that is no object."""
    if not isinstance(got, dict):
        raise TypeError(f"a SACK record is a {type(got).__name__}, not an object")
    return got.get("type") == "SackPacket"


def sack_checks(obs: Row, specs: dict[str, CheckSpec], sc: Scenario) -> list[Check]:
    """The four SACK checks, each over every SCRIPT step's truth beside the SACK sent for it;
    `specs` (ex4.SPEC) gives each check's title and points, so they are declared in one place."""
    if "raised" in obs:
        return [Check(s.id, s.title, s.points, False,
                      expected="the receiver answers every data packet with a SACK",
                      observed=str(obs["raised"]), hint="the traceback shows where your _sack "
                      "raised (the TODO in host_agent/core/receiver.py)")
                for s in specs.values() if s.id.startswith("sack.")]
    sacks = obs["sacks"]
    if not isinstance(sacks, list) or len(sacks) != len(SCRIPT):
        raise ValueError(f"{len(SCRIPT)} SACK records expected, one per arrival")
    rows = [{**row, "sack": got} for row, got in zip(_truth(sc), sacks, strict=True)]
    out = []
    for cid, body in (("sack.cack", _cack), ("sack.fields", _fields),
                      ("sack.bitmap", _bitmap), ("sack.far", _far)):
        spec = specs[cid]
        passed, expected, observed, hint = body(rows, obs)
        out.append(Check(cid, spec.title, spec.points, passed, expected=expected,
                         observed=observed, hint="" if passed else hint))
    return out


def _where(row: Row) -> str:
    return (f"after PSN {row['psn']} (start+{row['k']}) arrived as step {row['step'] + 1} of "
            f"{len(SCRIPT)}, cack = start+{row['cack']}")


def _cack(rows: list[Row], _obs: Row) -> Verdict:
    bad = []
    for row in rows:
        got = row["sack"]
        if not _is_sack(got):
            bad.append(f"{_where(row)}: answered with {got.get('type')}, not a SACK")
            continue
        want = (row["sc"].start + row["cack"]) % wire.PSN_MOD
        if got["cack_psn"] != want or got["bth_psn"] != want:
            bad.append(f"{_where(row)}: SACK says cack_psn {got['cack_psn']} (BTH PSN "
                       f"{got['bth_psn']}), expected {want}")
    return (not bad, "every SACK carries the cumulative ack (the first PSN not yet "
            "received) as cack_psn and as its BTH PSN",
            "all right" if not bad else f"{len(bad)} SACKs wrong, e.g. {bad[0]}",
            "use self.cack as it is when _sack runs: on_data has already advanced it")


def _field_problems(row: Row) -> list[str]:
    got = row["sack"]
    want = {"ack_psn_offset": row["k"] - row["cack"], "entropy": row["ev"],
            "m": wire.M_SKIP_ONCE if row["ce"] else wire.M_NONE, "probe_resp": False,
            "spdcid": row["sc"].local_qpn & 0xFFFF, "dpdcid": row["sc"].remote_qpn & 0xFFFF,
            "ooo_count": len(row["above"]), "rcvd_bytes": row["rcvd"],
            "dest_qp": row["sc"].remote_qpn}  # ack_psn_offset: the trigger relative to cack
    return [f"{_where(row)}: {key} = {got[key]}, expected {value}"
            for key, value in want.items() if got[key] != value]


def _fields(rows: list[Row], obs: Row) -> Verdict:
    bad = []
    for row in rows:
        if not _is_sack(row["sack"]):
            bad.append(f"{_where(row)}: not a SACK")
            continue
        bad += _field_problems(row)
    p, probe_ev = obs["probe"], rows[0]["sc"].probe_ev
    if not _is_sack(p):
        bad.append(f"probe_reply answered with {p.get('type')}, not a SACK")
    else:
        want = {"probe_resp": True, "entropy": probe_ev, "ack_psn_offset": 0,
                "m": wire.M_NONE}
        bad += [f"the reply to a CE-marked PROBE of EV {probe_ev:#x}: {key} = {p[key]}, "
                f"expected {value}" for key, value in want.items() if p[key] != value]
    return (not bad, "ack_psn_offset = trigger PSN - cack (signed, negative for a "
            "duplicate below cack, across the PSN wrap), the EV echoed, M = SKIP_ONCE for "
            "a CE-marked packet, ooo_count = PSNs received above cack, rcvd_bytes; a probe "
            "reply has probe_resp = 1, offset 0, M = NONE",
            "all right" if not bad else f"{len(bad)} wrong, e.g. {bad[0]}",
            "see docs/wire-format.md §2.6-2.7; PSNs are 24-bit serial numbers, so take "
            "differences as wire.psn_diff does, never as plain subtraction")


def _claims(row: Row) -> tuple[int, set[int]]:
    """(sack_offset, PSNs as offsets from START the bitmap says arrived)."""
    s = row["sack"]
    offset, bitmap = s["sack_offset"], s["sack_bitmap"]
    if type(offset) is not int or type(bitmap) is not int:
        raise TypeError("sack_offset and sack_bitmap are integers")
    base = row["cack"] + offset
    return offset, {base + i for i in range(64) if bitmap >> i & 1}


def _bitmap_problems(rows: list[Row], far: bool) -> tuple[list[str], int]:
    bad, n = [], 0
    for row in rows:
        if not _is_sack(row["sack"]) or (row["rel"] > FAR) != far:
            continue
        if row["rel"] >= WINDOW:
            continue  # refused (out of the receiver's window): a NACK, not ours to judge
        n += 1
        offset, claimed = _claims(row)
        cack = row["cack"]
        window = set(range(cack + offset, cack + offset + 64))
        truth = row["above"] & window
        trigger = row["k"]
        if claimed != truth:
            extra, lost = sorted(claimed - truth), sorted(truth - claimed)
            detail = []
            if extra:
                detail.append("claims " + ", ".join(f"cack+{x - cack}" for x in extra[:4]) +
                              " that did not arrive")
            if lost:
                detail.append("misses " + ", ".join(f"cack+{x - cack}" for x in lost[:4]))
            bad.append(f"{_where(row)}: sack_offset {offset}, bitmap "
                       f"{row['sack']['sack_bitmap']:#x} {' and '.join(detail)}")
        elif trigger >= cack and trigger not in window:
            bad.append(f"{_where(row)}: the trigger cack+{trigger - cack} is outside the bitmap "
                       f"(sack_offset {offset} covers cack+{offset}..cack+{offset + 63})")
    return bad, n


def _bitmap(rows: list[Row], _obs: Row) -> Verdict:
    bad, n = _bitmap_problems(rows, far=False)
    return (not bad, f"in all {n} SACKs for arrivals at most {FAR} PSNs above cack, bitmap "
            "bit i (LSB first) is set exactly when PSN cack + sack_offset + i arrived",
            "all right" if not bad else f"{len(bad)} wrong, e.g. {bad[0]}",
            "bit r of self._bits is PSN cack + r; the SACK's bit i is PSN cack + "
            "sack_offset + i, so shift self._bits right by sack_offset and keep 64 bits")


def _far(rows: list[Row], _obs: Row) -> Verdict:
    bad, n = _bitmap_problems(rows, far=True)
    return (not bad, f"in all {n} SACKs for arrivals more than {FAR} PSNs above cack, the "
            "64-bit window moves (sack_offset > 1) so the triggering PSN is inside it, "
            "and the bits are still exact",
            "all right" if not bad else f"{len(bad)} wrong, e.g. {bad[0]}",
            "a bitmap of 64 bits starting at cack + 1 cannot show an arrival 100 PSNs "
            "ahead: choose sack_offset so the trigger is the window's last bit then")
