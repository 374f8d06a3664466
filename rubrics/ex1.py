"""Exercise 1, uSID forwarding in P4: the my_usid check, the 16-bit shift, the usid_fwd lookup.

Stages: p4.compile, p4.interface -> the golden corpus's uSID and baseline cases on BMv2
(usid.my-usid, usid.shift, usid.fwd, p4.corpus) -> live.transfer. `observe` (in the sandbox,
rubrics.p4) reports what p4c said and each case's frames and counters, raw; `judge` (in the
grader, rubrics.p4_judge) rebuilds every case's outcome from them and the trusted corpus.

Diagnostic entries: every uSID case runs with extra usid_fwd entries ("decoys") whose keys
are what the common mistakes look up (the DA shifted by 8 or 32 bits, the block shifted too,
the uSID before the shift). They send the frame to port DECOY_PORT with a destination MAC
naming the mistake, so a wrong program's frame leaves where the grader can see its DA instead
of vanishing as UNKNOWN_USID. They never match the key a correct program looks up, so the
golden expectation of each case is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from grader.report import Check
from rubrics import p4, p4_judge
from rubrics.p4_judge import Miss, Outcome, addr, outer_dst

BLOCK_BITS = 32
USID_BITS = 16
ADDR_BITS = 128
MASK = (1 << ADDR_BITS) - 1
REST_MASK = (1 << (ADDR_BITS - BLOCK_BITS)) - 1  # DA[95:0]: everything after the block
DECOY_PORT = 5  # the corpus uses ports 1-4: the harness gets a fifth for the decoys
DECOY_MAC = 0x02DEC0DE0000  # + the mistake's index

SHIFTED = ["usid_shift_t0_up", "usid_shift_t1", "usid_last_hop_to_host", "usid_same_t0"]
UNKNOWN = ["usid_unknown_next", "usid_list_exhausted"]
BASELINE = ["baseline_local_host", "baseline_spine_down", "baseline_no_route",
            "baseline_ecmp_udp"]
NOT_MINE = "usid_not_this_switch"  # derived from usid_shift_t0_up (see _not_mine)


def _keep_block(da: int, rest: int) -> int:
    return (da & ~REST_MASK & MASK) | (rest & REST_MASK)


def shift(da: int, bits: int = USID_BITS) -> int:
    """F3216 uN: keep the block, move the rest left by `bits`, zero fill."""
    return _keep_block(da, (da & REST_MASK) << bits)


# What common wrong shifts make of a DA, and what to tell the student.
MISTAKES: list[tuple[str, Callable[[int], int], str]] = [
    ("shift8", lambda da: shift(da, 8),
     "the shift moved 8 bits, not 16: a uSID is 16 bits, so DA[95:0] takes DA[79:0] ++ 16w0"),
    ("shift32", lambda da: shift(da, 32),
     "the shift moved 32 bits, not 16: it skipped the next uSID as well"),
    ("shift4", lambda da: shift(da, 4),
     "the shift moved 4 bits, not 16: slice widths in P4 are bits, and a uSID is 16 bits"),
    ("whole", lambda da: (da << USID_BITS) & MASK,
     "the whole address moved, block included: keep DA[127:96] (the fcbb:bbbb block) and "
     "shift only DA[95:0]"),
    ("right", lambda da: _keep_block(da, (da & REST_MASK) >> USID_BITS),
     "the uSIDs moved right: the next uSID must move up into DA[95:80], so shift left"),
    ("rotate", lambda da: _keep_block(da, ((da & REST_MASK) << USID_BITS)
                                      | ((da >> 80) & 0xFFFF)),
     "the uSID list rotated: the vacated low 16 bits must be zero (16w0), not the old uSID"),
    ("none", lambda da: da,
     "the DA left unchanged: shift_usid must rewrite hdr.outer_ipv6.dst_addr"),
]


def prefix(da: int) -> int:
    return da >> (ADDR_BITS - BLOCK_BITS - USID_BITS)


def _usid_fwd_keys(case: Any) -> set[int]:
    from p4rt import names as n

    return {e.match_dict[n.USID_PREFIX].value for e in case.entries
            if e.table == n.USID_FWD_TABLE}


def with_decoys(case: Any) -> Any:
    """`case` plus usid_fwd entries for the keys the mistakes (and a stale key) look up."""
    from p4rt.program import usid_fwd

    da = outer_dst(case.frame)
    right = prefix(shift(da))
    taken = _usid_fwd_keys(case) | {right}
    extra = []
    for i, (_, wrong, _) in enumerate(MISTAKES):
        key = prefix(wrong(da))
        if key not in taken:
            taken.add(key)
            extra.append(usid_fwd(key, DECOY_PORT, DECOY_MAC + i))
    return replace(case, entities=case.entities + tuple(extra))


def _not_mine(base: Any) -> Any:
    """usid_shift_t0_up's frame with its active uSID already shifted away: the next uSID (the
    spine's) is not this T0's, so my_usid_table misses and the baseline table, which has no
    route for fcbb:bbbb::, drops it as NO_ROUTE. A program that looks usid_fwd up without
    checking my_usid_table's hit forwards it to the spine instead."""
    from p4rt import names as n
    from wire import layout as L

    frame = bytearray(base.frame)
    frame[L.OUTER_DST:L.OUTER_DST + 16] = shift(outer_dst(base.frame)).to_bytes(16, "big")
    return replace(base, name=NOT_MINE, frame=bytes(frame), outputs=(), one_of=False,
                   description="the active uSID is the next switch's, not this one's",
                   drop_reason="NO_ROUTE",
                   counters={n.DROP_COUNTER: {n.DROP_REASONS["NO_ROUTE"]: 1}})


def cases() -> list[Any]:
    golden = p4_judge.load_cases(SHIFTED + UNKNOWN + BASELINE)
    out = [with_decoys(golden[n]) for n in SHIFTED + UNKNOWN]
    out += [golden[n] for n in BASELINE]
    out.append(_not_mine(golden[SHIFTED[0]]))
    return out


def own_usid(case: Any) -> int | None:
    from p4rt import names as n

    for e in case.entries:
        if e.table == n.MY_USID_TABLE:
            return e.match_dict[n.USID_PREFIX].value
    return None


def _prefix_text(key: int) -> str:
    return addr(key << (ADDR_BITS - BLOCK_BITS - USID_BITS)).rstrip(":") + "::"


def _diagnose_da(case: Any, got: int) -> str:
    da = outer_dst(case.frame)
    for _, wrong, hint in MISTAKES:
        if got == wrong(da):
            return hint
    return (f"the DA should be {addr(shift(da))}: DA[127:96] kept, DA[95:0] = DA[79:0] ++ 16w0")


def _decoy(o: Outcome) -> str | None:
    """The mistake whose decoy entry the frame hit, if any."""
    from wire import layout as L

    out = o.single
    if out is None or out[0] != DECOY_PORT:
        return None
    index = int.from_bytes(out[1][L.ETH_DST:L.ETH_DST + 6], "big") - DECOY_MAC
    return MISTAKES[index][0] if 0 <= index < len(MISTAKES) else None


# ---- judges -----------------------------------------------------------------------------------

def judge_my_usid(o: Outcome) -> Miss | None:
    name = o.case.name
    if name in BASELINE or name == NOT_MINE:
        if o.golden_ok:
            return None
        if name == NOT_MINE:
            hint = ("its active uSID is not this switch's (my_usid_table has no entry for it), "
                    "so this switch must not act on it: only a my_usid_table hit leads to the "
                    "shift and usid_fwd_table; a miss goes to routing_v6_table")
        else:
            hint = ("this is baseline IPv6 traffic (DA fd00:...): my_usid_table misses, and a "
                    "miss must go to routing_v6_table (a miss there drops as NO_ROUTE)")
        return p4_judge.golden_miss(o, hint)
    mine = own_usid(o.case)
    if o.drop == "NO_ROUTE" or (o.outputs and not o.case.drop_reason and _decoy(o) is None
                                and o.single is not None
                                and outer_dst(o.single[1]) == outer_dst(o.case.frame)):
        return Miss(
            f"recognised as this switch's uSID ({_prefix_text(mine)}) and handled by the "
            f"uSID tables", p4_judge.describe(o),
            f"DA[127:80] is {_prefix_text(mine)}, which my_usid_table holds, yet the frame "
            f"went the baseline way: put DA[127:80] in local_metadata.usid_prefix, apply "
            f"my_usid_table and act on .hit")
    return None


def judge_shift(o: Outcome) -> Miss | None:
    want = outer_dst(o.case.outputs[0].frame)
    if o.single is None:
        return Miss(f"leaves with DA {addr(want)}", p4_judge.describe(o),
                    "no frame left, so its DA could not be checked: a usid_fwd_table miss "
                    "(UNKNOWN_USID) means the key you looked up is not DA[127:80] after a "
                    "16-bit shift" if o.drop == "UNKNOWN_USID" else
                    "the frame must leave: see the first failing check")
    port, frame = o.single
    got = outer_dst(frame)
    if got == want:
        return None
    return Miss(f"leaves on port {o.case.outputs[0].port} with DA {addr(want)}",
                f"left on port {port}, DA {addr(got)}", _diagnose_da(o.case, got))


def judge_fwd(o: Outcome) -> Miss | None:
    if o.golden_ok:
        return None
    mistake = _decoy(o)
    mine = own_usid(o.case)
    da = outer_dst(o.case.frame)
    if mistake == "none" and o.single and outer_dst(o.single[1]) == shift(da):
        hint = (f"usid_fwd_table was looked up with the uSID before the shift "
                f"({_prefix_text(mine)}, this switch's own): after my_usid_table's hit has "
                f"shifted the DA, read DA[127:80] into local_metadata.usid_prefix again")
    elif mistake is not None:
        hint = dict((m, h) for m, _, h in MISTAKES)[mistake]
    elif o.case.drop_reason == "UNKNOWN_USID":
        hint = ("usid_fwd_table has no entry for the next uSID: such a frame is dropped with "
                "local_metadata.drop = true and drop_reason = DROP_UNKNOWN_USID")
    elif not o.outputs and o.drop == "UNKNOWN_USID":
        hint = (f"usid_fwd_table missed: its key must be DA[127:80] after the shift, here "
                f"{_prefix_text(prefix(shift(da)))}")
    else:
        hint = ("the next uSID's usid_fwd_table entry gives the port and the next hop's MAC "
                "(set_next_hop); the rest of the frame must be as the corpus says")
    return p4_judge.golden_miss(o, hint)


def judge_all(o: Outcome) -> Miss | None:
    hint = "compare the fields named above with docs/wire-format.md §3 and §5"
    return p4_judge.golden_miss(o, hint)


PLAN: list[p4_judge.Stage] = [
    ("usid.my-usid", "frames whose DA[127:80] is this switch's uSID take the uSID path, all "
     "others the baseline table", 2, SHIFTED + UNKNOWN + BASELINE + [NOT_MINE], judge_my_usid),
    ("usid.shift", "the uSID shift: block kept, the rest moved left by 16 bits, zero fill",
     3, SHIFTED, judge_shift),
    ("usid.fwd", "usid_fwd_table looked up with the shifted DA[127:80]: right port and MAC, "
     "a miss drops as UNKNOWN_USID", 3, SHIFTED + UNKNOWN, judge_fwd),
    ("p4.corpus", "every frame byte for byte as the golden corpus says", 1,
     SHIFTED + UNKNOWN + BASELINE + [NOT_MINE], judge_all),
]
LIVE_POINTS = 2
LIVE_HINT = ("the corpus cases passed but a transfer did not: look at the switch logs the error "
             "names; a table the controller fills may not be applied the way it expects")
CHECKS = p4_judge.stage_specs(PLAN, LIVE_POINTS)


def observe(ctx: Any) -> dict[str, Any]:
    """In the sandbox: compile the student's program, run the cases (decoys on port
    DECOY_PORT), then the live transfer, each stage only when the earlier ones passed."""
    return p4.observe_stages(ctx, cases(), PLAN, ports=DECOY_PORT)


def judge(obs: Any, ctx: Any) -> Iterator[Check]:
    """The verdicts, from the raw report and the trusted golden corpus."""
    yield from p4_judge.judge_stages(obs, ctx.target, cases(), PLAN, LIVE_POINTS, LIVE_HINT)
