"""The software pipeline reads action parameters by name, so a P4 action whose parameters
were reordered cannot be misread (issue 35: they were unpacked by position)."""

from __future__ import annotations

from types import SimpleNamespace

from p4rt import names as N
from p4rt.p4info import P4InfoIndex, load_committed
from softswitch.pipeline import NextHop, param_getter

PORT_CONFIG = (N.PARAM_HOST_FACING, N.PARAM_ECN_ENABLED, N.PARAM_TRIM_THRESHOLD,
               N.PARAM_ECN_THRESHOLD, N.PARAM_SMAC)


def _index(order: list[str]) -> SimpleNamespace:
    params = {i + 1: (name, 8) for i, name in enumerate(order)}
    return SimpleNamespace(action=lambda name: SimpleNamespace(params=params))


def test_parameters_are_read_by_name_whatever_their_order() -> None:
    values = {N.PARAM_HOST_FACING: 1, N.PARAM_ECN_ENABLED: 0, N.PARAM_TRIM_THRESHOLD: 30,
              N.PARAM_ECN_THRESHOLD: 12, N.PARAM_SMAC: 0x0200000001FF}
    for order in (list(PORT_CONFIG), list(reversed(PORT_CONFIG)),
                  [N.PARAM_SMAC, N.PARAM_ECN_THRESHOLD, N.PARAM_HOST_FACING,
                   N.PARAM_TRIM_THRESHOLD, N.PARAM_ECN_ENABLED]):
        get = param_getter(_index(order), N.SET_PORT_CONFIG, *PORT_CONFIG)
        held = tuple(values[name] for name in order)  # what an entry holds: P4Info order
        assert get(held) == tuple(values[name] for name in PORT_CONFIG), order


def test_committed_p4info_parameters_resolve() -> None:
    idx = P4InfoIndex.build(load_committed())
    get = param_getter(idx, N.SET_PORT_CONFIG, *PORT_CONFIG)
    names = [name for name, _ in idx.action(N.SET_PORT_CONFIG).params.values()]
    assert get(tuple(names)) == PORT_CONFIG


def test_next_hop_fields_are_named() -> None:
    hop = NextHop(3, 0, 12, b"x" * 12, None, True, 0, 1, 40, 16, 16)
    assert (hop.port, hop.trim_threshold, hop.ecn_threshold, hop.least) == (3, 40, 16, 16)
