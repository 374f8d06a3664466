"""NetworkConfig's port rate: the default follows the target (BMv2 needs more CPU per frame),
an explicit rate or None is kept, anything else is rejected with what to write instead."""

from __future__ import annotations

import pytest

pytest.importorskip("mininet.net", reason="emulation.netconfig imports the switch targets")

from emulation.netconfig import (  # noqa: E402
    BMV2_PORT_RATE_PPS,
    DEFAULT_PORT_RATE_PPS,
    NetworkConfig,
    NetworkError,
)
from nodes import targets


@pytest.mark.parametrize("target,installed,rate", [
    ("soft", True, DEFAULT_PORT_RATE_PPS), ("bmv2", False, BMV2_PORT_RATE_PPS),
    ("auto", True, BMV2_PORT_RATE_PPS), ("auto", False, DEFAULT_PORT_RATE_PPS)])
def test_default_rate_follows_the_target(monkeypatch, target: str, installed: bool,
                                         rate: int) -> None:
    monkeypatch.setattr(targets.shutil, "which", lambda _: "/usr/bin/x" if installed else None)
    assert NetworkConfig(target=target).port_rate_pps == rate
    assert BMV2_PORT_RATE_PPS < DEFAULT_PORT_RATE_PPS


@pytest.mark.parametrize("rate", [None, 123])
def test_an_explicit_rate_is_kept(rate: int | None) -> None:
    assert NetworkConfig(target="bmv2", port_rate_pps=rate).port_rate_pps == rate


@pytest.mark.parametrize("rate", ["fast", 0])
def test_a_bad_rate_is_rejected(rate: object) -> None:
    with pytest.raises(NetworkError, match="port_rate_pps"):
        NetworkConfig(port_rate_pps=rate)  # type: ignore[arg-type]
