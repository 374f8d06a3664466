"""The Mininet CLI's MRC commands, without a fabric: Mininet's own `link` is routed to the
fabric's link failure (which BMv2 survives) instead of taking interfaces down."""

from __future__ import annotations

import pytest

pytest.importorskip("mininet.cli", reason="Mininet is not importable (apt install mininet)")

from topologies.cli_commands import MrcCLI  # noqa: E402


class FakeNetwork:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.link_log: list[dict] = []

    def link_down(self, a: str, b: str) -> None:
        self.calls.append(("down", a, b))
        self.link_log.append({"event": "down", "a": a, "b": b})

    def link_up(self, a: str, b: str) -> None:
        self.calls.append(("up", a, b))
        event = {"event": "up", "a": a, "b": b}
        if ("cut", a, b) in self.calls:
            event["cut_dropped"] = 17
        self.link_log.append(event)

    def link_cut(self, a: str, b: str) -> None:
        self.calls.append(("cut", a, b))
        self.link_log.append({"event": "cut", "a": a, "b": b})


def make_cli() -> tuple[MrcCLI, FakeNetwork]:
    cli = MrcCLI.__new__(MrcCLI)  # CLI.__init__ would start the interactive loop
    cli.mrc = FakeNetwork()
    cli.failures = 0
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


def test_mrc_link_cut_and_mend_report_what_the_cut_dropped(
        capsys: pytest.CaptureFixture) -> None:
    cli, net = make_cli()
    cli.do_mrc_link("cut p0l1 h3")
    cli.do_mrc_link("up p0l1 h3")
    assert net.calls == [("cut", "p0l1", "h3"), ("up", "p0l1", "h3")]
    out = capsys.readouterr().out
    assert "link p0l1 - h3 cut" in out and "(the cut dropped 17 frames)" in out
    assert cli.failures == 0
    cli.do_mrc_link("snip p0l1 h3")
    assert cli.failures == 1 and "mrc_link down|up|cut A B" in capsys.readouterr().err


def test_mrc_capture_takes_the_link_either_way_and_refuses_bad_seconds(capsys, tmp_path) -> None:
    cli, net = make_cli()
    x, y, z = (tmp_path / f"{n}.pcap" for n in "xyz")
    captured: list[tuple] = []

    def capture(a: str, b: str, seconds: float, path) -> int:
        captured.append((a, b, seconds, str(path)))
        return 12

    net.capture = capture  # type: ignore[attr-defined]
    cli.do_mrc_capture(f"p0l0-p0s1 2 {x}")
    cli.do_mrc_capture(f"h0 p0l0 0.5 {y}")
    assert captured == [("p0l0", "p0s1", 2.0, str(x)), ("h0", "p0l0", 0.5, str(y))]
    assert "12 frames of p0l0 - p0s1" in capsys.readouterr().out
    cli.do_mrc_capture(f"p0l0-p0s1 soon {z}")
    assert cli.failures == 1 and "usage: mrc_capture" in capsys.readouterr().err


def test_mrc_web_without_a_view_owner_says_how_to_get_one(capsys) -> None:
    cli, _net = make_cli()
    cli.views, cli.view_url = None, None
    cli.do_mrc_web("")
    assert cli.failures == 1 and "--web" in capsys.readouterr().err
    cli.view_url = "http://127.0.0.1:8765/?token=abc"
    cli.do_mrc_web("")
    assert cli.failures == 1 and "token=abc" in capsys.readouterr().out
