"""Exercise 2, trimming and priority in P4: cut a trimmable packet when the egress data queue
is at or above the trim threshold, fix the lengths, set the trimmed DSCP (last-hop variant on
host-facing ports), send it on the high-priority queue; ECN marking except on host ports.

Stages: p4.compile, p4.interface -> the golden corpus's trimming, priority and ECN cases on
BMv2 (trim.cut, trim.lengths, trim.dscp, trim.priority, ecn.mark, ecn.host-port, p4.corpus)
-> live.transfer (`observe` reports the raw frames and counters from the sandbox, `judge`
decides from them and the trusted corpus: rubrics.p4, rubrics.p4_judge). Which queue a packet
took is seen through the corpus's prelude cases: egress records the data queue's depth only
from packets leaving the data queue, so a trimmed header or SACK sent on the data queue
resets the depth and the data frame after it is not trimmed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from grader.report import Check
from rubrics import p4, p4_judge
from rubrics.p4_judge import Miss, Outcome, traffic_class, u16

TRIMMED = ["trim_fabric_port", "trim_exact_threshold", "trim_retransmission",
           "trim_cuts_immdt", "trim_last_hop"]
UNTRIMMED = ["queue_empty_no_change", "ecn_fabric_port", "no_trim_134_bytes",
             "trimmed_not_retrimmed", "control_sack_not_trimmed", "control_nack_not_trimmed",
             "non_roce_udp_not_trimmed"]
PRIORITY = ["trim_after_sack_departure", "trim_after_header_departure",
            "trim_after_trimmed_departure", "trim_after_many_departures",
            "no_trim_after_data_queue_drained"]
ECN = ["ecn_fabric_port", "ecn_ect1", "ecn_not_ect", "ecn_control_not_marked",
       "no_trim_134_bytes", "non_roce_udp_not_trimmed", "queue_empty_no_change"]
HOST_ECN_ON = "ecn_not_on_host_port_ecn_enabled"  # derived, see _host_port_ecn_enabled
ECN_HOST = ["ecn_not_on_host_port", HOST_ECN_ON, "trim_last_hop"]
GOLDEN = list(dict.fromkeys(TRIMMED + UNTRIMMED + PRIORITY + ECN + ["ecn_not_on_host_port"]))
ALL = GOLDEN + [HOST_ECN_ON]

ECN_NAMES = {0: "Not-ECT (00)", 1: "ECT(1) (01)", 2: "ECT(0) (10)", 3: "CE (11)"}
TRIM_RULE = ("trim when the port is configured, the packet is `trimmable` (DSCP TRIMMABLE or "
             "TRIMMABLE_RETX, with a RETH), longer than TRIMMED_FRAME_LEN, and "
             "local_metadata.queue_depth >= local_metadata.trim_threshold; then "
             "truncate(TRIMMED_FRAME_LEN)")


def _host_port_ecn_enabled(base: Any) -> Any:
    """ecn_not_on_host_port with ECN enabled in the host port's own configuration: the
    controller never sets that, so only this case tells a program that checks host_facing
    from one that relies on ecn_enabled alone."""
    from dataclasses import replace

    from p4rt import names as n
    from p4rt.entities import Action, TableEntry

    port = base.outputs[0].port
    entities = []
    for e in base.entities:
        if isinstance(e, TableEntry) and e.table == n.PORT_CONFIG_TABLE \
                and e.match_dict[n.EGRESS_PORT].value == port:
            params = tuple((k, 1 if k == n.PARAM_ECN_ENABLED else v) for k, v in e.action.params)
            e = replace(e, action=Action(e.action.name, params))
        entities.append(e)
    return replace(base, name=HOST_ECN_ON, entities=tuple(entities),
                   description="no ECN marking on a host-facing port, even one whose port "
                               "config has ECN enabled")


def cases() -> list[Any]:
    golden = p4_judge.load_cases(GOLDEN)
    return list(golden.values()) + [_host_port_ecn_enabled(golden["ecn_not_on_host_port"])]


def _depth(case: Any) -> str:
    from p4rt import names as n

    port = case.outputs[0].port if case.outputs else None
    depth = case.registers.get(n.QUEUE_DEPTH_REGISTER, {}).get(port, 0)
    return f"queue depth {depth} on port {port}"


def _out(o: Outcome) -> bytes | None:
    return o.single[1] if o.single is not None else None


def _no_frame(o: Outcome, expected: str) -> Miss | None:
    if o.single is not None:
        return None
    return Miss(expected, p4_judge.describe(o), "exactly one frame must leave: compare with the "
                "reference behaviour in docs/wire-format.md §5")


# ---- judges -----------------------------------------------------------------------------------

def judge_cut(o: Outcome) -> Miss | None:
    want = len(o.case.outputs[0].frame)
    trim = want < len(o.case.frame)
    expected = (f"cut to {want} bytes ({_depth(o.case)})" if trim else
                f"left whole, {want} bytes ({_depth(o.case)})")
    missing = _no_frame(o, expected)
    if missing:
        return missing
    got = len(_out(o))
    if got == want:
        return None
    if trim:
        hint = f"this case: {o.case.description}. Rule: {TRIM_RULE}"
        if got > want and got != len(o.case.frame):
            hint = (f"cut to {got} bytes, not {want}: the trimmed frame keeps Ethernet, both "
                    f"IPv6 headers, UDP, BTH, METH and RETH, TRIMMED_FRAME_LEN bytes")
    else:
        hint = (f"this frame must not be trimmed ({o.case.description}). Rule: {TRIM_RULE}; "
                f"control and already trimmed packets are never `trimmable`")
    return Miss(expected, f"left with {got} bytes", hint)


def judge_lengths(o: Outcome) -> Miss | None:
    from wire import layout as L

    want = o.case.outputs[0].frame
    missing = _no_frame(o, "a trimmed frame")
    if missing:
        return missing
    got = _out(o)
    if len(got) != len(want):
        return Miss(f"cut to {len(want)} bytes", f"left with {len(got)} bytes",
                    "the frame was not cut (see trim.cut), so its lengths cannot be checked")
    fields = [("outer IPv6 payload length", L.OUTER_PAYLOAD_LEN, "hdr.outer_ipv6.payload_len",
               "TRIMMED_OUTER_PAYLOAD_LEN"),
              ("inner IPv6 payload length", L.INNER_PAYLOAD_LEN, "hdr.inner_ipv6.payload_len",
               "TRIMMED_INNER_PAYLOAD_LEN"),
              ("UDP length", L.UDP_LENGTH_FIELD, "hdr.udp.len", "TRIMMED_UDP_LEN")]
    wrong = [(name, u16(got, off), u16(want, off), lhs, const)
             for name, off, lhs, const in fields if u16(got, off) != u16(want, off)]
    if not wrong:
        return None
    return Miss(", ".join(f"{name} {w}" for name, _, w, _, _ in wrong),
                ", ".join(f"{name} {g}" for name, g, _, _, _ in wrong),
                "truncate() cuts bytes when the frame is sent but rewrites no header: set "
                + ", ".join(f"{lhs} = {const}" for _, _, _, lhs, const in wrong)
                + " (a receiver checks the lengths against the bytes it got)")


def judge_dscp(o: Outcome) -> Miss | None:
    from wire import layout as L

    want = traffic_class(o.case.outputs[0].frame) >> 2
    missing = _no_frame(o, f"DSCP {want}")
    if missing:
        return missing
    got = traffic_class(_out(o)) >> 2
    if got == want:
        return None
    host = want == L.DSCP_TRIMMED_LASTHOP
    port = o.case.outputs[0].port
    hint = (f"port {port} is host-facing (local_metadata.host_facing == 1): a header trimmed "
            f"there gets DSCP_TRIMMED_LASTHOP ({L.DSCP_TRIMMED_LASTHOP}), so the receiver "
            f"knows the loss was on its own last hop" if host else
            f"port {port} is a fabric port: a trimmed header gets DSCP_TRIMMED "
            f"({L.DSCP_TRIMMED}); DSCP_TRIMMED_LASTHOP is only for host-facing ports")
    return Miss(f"DSCP {want}", f"DSCP {got}", hint)


def judge_priority(o: Outcome) -> Miss | None:
    """Whether the case frame was trimmed after its prelude: that is what the queue the
    prelude took decides (the frame's other fields are trim.* and p4.corpus's business)."""
    want = len(o.case.outputs[0].frame)
    want_trim = want < len(o.case.frame)
    got = _out(o)
    if got is not None and len(got) == want and o.single[0] == o.case.outputs[0].port:
        return None
    before = o.case.prelude
    if want_trim and got is not None and len(got) == len(o.case.frame):
        hint = (f"{len(before)} frame(s) left this port first ({o.case.description}); after "
                f"them this data frame was not trimmed. If trim.cut passes, one of them reset "
                f"the depth egress records: egress records it only for PRIORITY_DATA packets, "
                f"so control "
                f"packets (high_priority) and trimmed headers must get standard_metadata."
                f"priority = PRIORITY_HIGH")
    elif not want_trim and got is not None and len(got) < len(o.case.frame):
        hint = ("an untrimmable data frame went first and left the data queue empty: data "
                "packets must use PRIORITY_DATA so egress records the depth they leave behind")
    else:
        hint = "compare the fields named above with docs/wire-format.md §5 (Priority)"
    return Miss(p4_judge.expected_text(o.case), p4_judge.describe(o), hint)


def _ecn_miss(o: Outcome, host: bool) -> Miss | None:
    want = traffic_class(o.case.outputs[0].frame) & 3
    missing = _no_frame(o, ECN_NAMES[want])
    if missing:
        return missing
    got = traffic_class(_out(o)) & 3
    if got == want:
        return None
    original = traffic_class(o.case.frame) & 3
    if host:
        hint = ("no ECN marking on a host-facing port (local_metadata.host_facing == 1): a CE "
                "mark must mean congestion inside the fabric, which the sender avoids by "
                "changing EV, not a busy receiver link")
    elif got == 3 and original == 0:
        hint = "a Not-ECT packet is never marked: only ECT(0) and ECT(1) become CE"
    elif got == 3:
        hint = (f"this frame must not be marked ({o.case.description}): mark only data "
                f"packets (not high_priority), not trimmed ones, on ECN-enabled fabric ports "
                f"at depth >= ecn_threshold")
    else:
        hint = (f"mark CE: an ECT(0) or ECT(1) data packet at {_depth(o.case)} (>= "
                f"ecn_threshold) on an ECN-enabled fabric port")
    return Miss(f"ECN {ECN_NAMES[want]}", f"ECN {ECN_NAMES[got]}", hint)


def judge_ecn(o: Outcome) -> Miss | None:
    return _ecn_miss(o, host=False)


def judge_ecn_host(o: Outcome) -> Miss | None:
    return _ecn_miss(o, host=True)


def judge_all(o: Outcome) -> Miss | None:
    return p4_judge.golden_miss(o, "compare the fields named above with docs/wire-format.md §4-5")


PLAN: list[p4_judge.Stage] = [
    ("trim.cut", "trimmable packets are cut to 134 bytes at or above the trim threshold, "
     "nothing else is", 3, TRIMMED + UNTRIMMED, judge_cut),
    ("trim.lengths", "a trimmed frame's outer/inner IPv6 payload lengths and UDP length "
     "are fixed", 2, TRIMMED, judge_lengths),
    ("trim.dscp", "a trimmed frame gets DSCP TRIMMED, TRIMMED_LASTHOP on host-facing "
     "ports", 2, TRIMMED, judge_dscp),
    ("trim.priority", "control and trimmed packets use the high-priority queue, data the "
     "data queue", 2, PRIORITY, judge_priority),
    ("ecn.mark", "ECT data packets at or above the ECN threshold are marked CE on fabric "
     "ports, nothing else", 2, ECN, judge_ecn),
    ("ecn.host-port", "no ECN marking on host-facing ports", 1, ECN_HOST, judge_ecn_host),
    ("p4.corpus", "every frame byte for byte as the golden corpus says", 1, ALL, judge_all),
]
LIVE_POINTS = 2
LIVE_HINT = ("the corpus cases passed but a transfer did not: look at the switch logs the error "
             "names")
CHECKS = p4_judge.stage_specs(PLAN, LIVE_POINTS)


def observe(ctx: Any) -> dict[str, Any]:
    """In the sandbox: compile the student's program, run the cases, then the live transfer,
    each stage only when the earlier ones passed."""
    return p4.observe_stages(ctx, cases(), PLAN)


def judge(obs: Any, ctx: Any) -> Iterator[Check]:
    """The verdicts, from the raw report and the trusted golden corpus."""
    yield from p4_judge.judge_stages(obs, ctx.target, cases(), PLAN, LIVE_POINTS, LIVE_HINT)
