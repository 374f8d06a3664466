"""Exercise 2 (trimming and priority in P4).

Fast: the file sets and the derived host-port case. Slow (BMv2, root): the skeleton compiles
and fails at the corpus stage, each wrong solution fails its named check, the solution gets
full marks (with Mininet, the live stage too).
"""

from __future__ import annotations

import pytest

from grader import catalog, challenge, judging, regions, workspace
from p4rt import names as n
from rubrics import ex2, p4_judge
from tests.grader import p4_support as S

EX = catalog.load(2)
FILE = "p4src/include/ingress.p4"
WRONG = {w.name: w for w in EX.wrong_solutions()}


def test_file_sets_cut_only_exercise_2() -> None:
    solution = workspace.solution(EX)[FILE]
    skeleton = workspace.skeleton(EX)[FILE]
    assert solution == (catalog.ROOT / FILE).read_text()
    assert [r.name for r in regions.find(solution) if r.number == 2] == ["trim", "ecn",
                                                                        "priority"]
    for name in ("trim", "ecn", "priority"):
        assert "TODO exercise 2" in regions.body(skeleton, 2, name)
        assert "truncate(TRIMMED_FRAME_LEN)" not in regions.body(skeleton, 2, name)
    for name in ("shift", "usid-forwarding"):  # exercise 1's regions stay solved
        assert regions.body(skeleton, 1, name) == regions.body(solution, 1, name)
    assert {"trim-without-lengths"} <= set(WRONG) and len(WRONG) >= 2
    for wrong in WRONG.values():
        assert workspace.fixture(EX, wrong)[FILE] != solution
        assert workspace.fixture_expectation(wrong)["fails"].split(".")[0] in {"trim", "ecn"}


def test_cases_exist_and_the_host_port_variant_enables_ecn() -> None:
    cases = {c.name: c for c in ex2.cases()}
    assert set(cases) == set(ex2.ALL)
    variant, base = cases[ex2.HOST_ECN_ON], cases["ecn_not_on_host_port"]
    assert variant.outputs == base.outputs and variant.frame == base.frame
    port = base.outputs[0].port

    def ecn_enabled(case) -> int:
        (entry,) = [e for e in case.entries if e.table == n.PORT_CONFIG_TABLE
                    and e.match_dict[n.EGRESS_PORT].value == port]
        params = entry.action.param_dict
        assert params[n.PARAM_HOST_FACING] == 1
        return params[n.PARAM_ECN_ENABLED]

    assert (ecn_enabled(base), ecn_enabled(variant)) == (0, 1)


def test_trimmed_cases_are_cut_to_134_bytes_and_the_others_whole() -> None:
    for name, case in p4_judge.load_cases(ex2.TRIMMED + ex2.UNTRIMMED).items():
        out = len(case.outputs[0].frame)
        assert (out < len(case.frame)) == (name in ex2.TRIMMED), name
        assert out == 134 or name not in ex2.TRIMMED


def _with(frame: bytes, **fields: int) -> bytes:
    """`frame` with 16-bit fields (offset=value) or the traffic class (tc=value) replaced."""
    from wire import layout as L

    out = bytearray(frame)
    for offset, value in fields.items():
        if offset == "tc":
            word = int.from_bytes(out[L.OUTER:L.OUTER + 4], "big")
            word = (word & ~(0xFF << L.TC_SHIFT)) | (value << L.TC_SHIFT)
            out[L.OUTER:L.OUTER + 4] = word.to_bytes(4, "big")
        else:
            at = getattr(L, offset)
            out[at:at + 2] = value.to_bytes(2, "big")
    return bytes(out)


def test_the_judges_name_the_mistake() -> None:
    """Without a switch: outcomes shaped like those of the wrong solutions get their hints."""
    from wire import layout as L

    cases = {c.name: c for c in ex2.cases()}
    trim = cases["trim_fabric_port"]
    want = trim.outputs[0].frame
    unfixed = _with(want, OUTER_PAYLOAD_LEN=p4_judge.u16(trim.frame, L.OUTER_PAYLOAD_LEN),
                    UDP_LENGTH_FIELD=p4_judge.u16(trim.frame, L.UDP_LENGTH_FIELD))
    outcome = p4_judge.Outcome(trim, [(3, unfixed)])
    assert ex2.judge_cut(outcome) is None and ex2.judge_dscp(outcome) is None
    miss = ex2.judge_lengths(outcome)
    assert "hdr.outer_ipv6.payload_len = TRIMMED_OUTER_PAYLOAD_LEN" in miss.hint
    assert "hdr.udp.len = TRIMMED_UDP_LEN" in miss.hint and "inner" not in miss.hint
    host = cases[ex2.HOST_ECN_ON]
    marked = _with(host.outputs[0].frame, tc=p4_judge.traffic_class(host.outputs[0].frame) | 3)
    miss = ex2.judge_ecn_host(p4_judge.Outcome(host, [(host.outputs[0].port, marked)]))
    assert miss is not None and "host-facing" in miss.hint and "CE" in miss.observed
    last = cases["trim_last_hop"]
    ecn = p4_judge.traffic_class(last.outputs[0].frame) & 3
    fabric_dscp = _with(last.outputs[0].frame, tc=(L.DSCP_TRIMMED << 2) | ecn)
    miss = ex2.judge_dscp(p4_judge.Outcome(last, [(last.outputs[0].port, fabric_dscp)]))
    assert "DSCP_TRIMMED_LASTHOP" in miss.hint and miss.observed == "DSCP 12"
    after = cases["trim_after_trimmed_departure"]
    whole = p4_judge.Outcome(after, [(after.outputs[0].port, after.frame[:])])
    assert "PRIORITY_HIGH" in ex2.judge_priority(whole).hint


def test_the_judge_gives_full_marks_to_a_correct_switchs_report() -> None:
    obs = S.correct_observations(ex2.cases())
    checks = judging.judge(EX, {"observations": obs}, "bmv2", challenge=challenge.new())
    assert [c.id for c in checks] == [s.id for s in ex2.CHECKS] and all(c.passed for c in checks)
    obs["corpus"]["cases"]["trim_fabric_port"]["outputs"] = [
        [3, p4_judge.load_cases(["trim_fabric_port"])["trim_fabric_port"].frame.hex()]]
    judged = judging.judge(EX, {"observations": obs}, "bmv2", challenge=challenge.new())
    cut = next(c for c in judged if c.id == "trim.cut")
    assert not cut.passed and "trim_fabric_port" in cut.expected


@pytest.mark.slow
@pytest.mark.bmv2
@pytest.mark.root
def test_skeleton_compiles_and_fails_at_the_corpus_stage() -> None:
    S.require_corpus_stage()
    grade = S.grade(2, workspace.skeleton(EX), "skeleton")
    S.assert_useful_failures(grade)
    by_id = {c.id: c for c in grade.checks}
    assert by_id["p4.compile"].passed and by_id["p4.interface"].passed  # the stubs compile
    assert not grade.full_marks and S.first_failure(grade) == "trim.cut"
    assert by_id["live.transfer"].observed.startswith(S.NOT_RUN)


@pytest.mark.slow
@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_solution_fails_its_check(name: str) -> None:
    S.require_corpus_stage()
    wrong = WRONG[name]
    expect = workspace.fixture_expectation(wrong)
    grade = S.grade(2, workspace.fixture(EX, wrong), f"wrong/{name}")
    S.assert_useful_failures(grade)
    assert grade.failed(expect["fails"]) and S.first_failure(grade) == expect["fails"], \
        [(c.id, c.passed, c.observed) for c in grade.checks]
    if name == "trim-without-lengths":
        lengths = next(c for c in grade.checks if c.id == "trim.lengths")
        assert "hdr.udp.len = TRIMMED_UDP_LEN" in lengths.hint


@pytest.mark.slow
@pytest.mark.bmv2
@pytest.mark.root
def test_solution_gets_full_marks() -> None:
    S.require_live_stage()
    grade = S.grade(2, workspace.solution(EX), "solution")
    assert grade.full_marks, [(c.id, c.observed, c.hint) for c in grade.checks if not c.passed]
