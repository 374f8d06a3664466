"""The Mininet CLI's MRC commands, without a fabric: Mininet's own `link` is routed to the
fabric's link failure (which BMv2 survives) instead of taking interfaces down."""

from __future__ import annotations

import pytest

pytest.importorskip("mininet.cli", reason="Mininet is not importable (apt install mininet)")

from topologies.cli_commands import MrcCLI  # noqa: E402


class FakeNetwork:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def link_down(self, a: str, b: str) -> None:
        self.calls.append(("down", a, b))

    def link_up(self, a: str, b: str) -> None:
        self.calls.append(("up", a, b))


def make_cli() -> tuple[MrcCLI, FakeNetwork]:
    cli = MrcCLI.__new__(MrcCLI)  # CLI.__init__ would start the interactive loop
    cli.mrc = FakeNetwork()
    return cli, cli.mrc


def test_mininet_link_command_uses_the_fabric_failure(capsys: pytest.CaptureFixture) -> None:
    cli, net = make_cli()
    cli.do_link("p0l0 p0s1 down")
    cli.do_link("p0l0 p0s1 up")
    assert net.calls == [("down", "p0l0", "p0s1"), ("up", "p0l0", "p0s1")]
    cli.do_link("p0l0 p0s1 sideways")
    cli.do_link("p0l0")
    assert net.calls == [("down", "p0l0", "p0s1"), ("up", "p0l0", "p0s1")]
    assert "usage" in capsys.readouterr().err
