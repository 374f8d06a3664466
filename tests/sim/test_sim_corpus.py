"""The golden corpus on the simulator's switches: the same cases BMv2 and the software switch
pass, sent into a SwitchNode of sim.network and read where they arrive on its neighbours."""

from __future__ import annotations

import pytest

from fabric.topology import Fabric
from p4rt import names as N
from p4rt.corpus import Case, case_updates, load_cases
from sim.engine import EventLoop
from sim.network import Network, SwitchNode
from softswitch.store import DeviceState
from tests.switch.p4rt_support import CODEC, IDX

CASES = load_cases()
# p0l0/p0l1: hosts on ports 1-2, spines on 3-4; p0s0/p0s1: leaves on ports 1-2 (as the corpus)
FABRIC = Fabric(planes=1, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)


def _packets(node: SwitchNode) -> dict[int, list[int]]:
    return {cid: [cell[0] for cell in cells] for cid, cells in node.state.counters.items()}


def run_case(case: Case) -> tuple[list[tuple[int, bytes]], dict[str, list[int]]]:
    """Program `case.switch` with the case's entries and registers, send its prelude (each
    after the previous one has left) and its frame; return (port, frame) of what it sent and
    how much each indexed counter (by name) rose with the case frame."""

    def program(switch) -> DeviceState:
        state = DeviceState(IDX)
        updates = case_updates(CODEC, case) if switch.name == case.switch else []
        assert [e for e in state.write(updates) if e is not None] == []
        return state

    loop = EventLoop()
    net = Network(FABRIC, loop, program=program)
    node = net.switches[case.switch]
    sent: list[tuple[int, bytes]] = []
    for port in node.ports.values():
        def record(frame: bytes, arrived_on, number: int = port.number) -> None:
            sent.append((number, bytes(frame)))
        port.peer.node.receive = record  # type: ignore[union-attr, method-assign]
    for pre in case.prelude:
        node.receive(pre.frame, node.ports[pre.port])
        loop.run(until=loop.now + 1.0)
    sent.clear()
    before = _packets(node)
    node.receive(case.frame, node.ports[case.ingress_port])
    loop.run(until=loop.now + 1.0)
    after = _packets(node)
    rises = {IDX.counters[cid].name: [a - b for a, b in zip(after[cid], before[cid], strict=True)]
             for cid in after}
    return sent, rises


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_corpus_on_the_simulator_switch(case: Case) -> None:
    sent, rises = run_case(case)
    drops = rises[N.DROP_COUNTER]
    if case.drop_reason is not None:
        assert sent == []
        assert drops[N.DROP_REASONS[case.drop_reason]] == 1 and sum(drops) == 1
        return
    expected = [(o.port, o.frame) for o in case.outputs]
    if case.one_of:
        assert len(sent) == 1 and sent[0] in expected
    else:
        assert sent == expected
    assert sum(drops) == 0
    for name, cells in case.counters.items():
        rose = {i: c for i, c in enumerate(rises[name]) if c}
        assert rose == {i: c for i, c in cells.items() if c}, name
