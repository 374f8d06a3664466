"""The run report (topologies.runreport, runview): one self-contained page that carries its
recording, written only into a new file; the recorder's arithmetic on a fake fabric."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fabric.topology import Fabric
from topologies.agents import AgentError
from topologies.runreport import ReportError, render, write_report
from topologies.runview import RunRecorder, fabric_layout

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)


def _recording() -> dict:
    layout = fabric_layout(FABRIC)
    first = layout["links"][0]["id"]
    samples = [{"t": 0.0, "down": [], "evs": {"0x1000": [0, "p0s0", "GOOD", 1]}},
               {"t": 0.5, "down": [first], "pps": {first: [10.0, 0.0]}, "goodput_bps": 1e6,
                "evs": {"0x1000": [0, "p0s0", "ASSUMED_BAD", 9]},
                "counters": {"retransmits": 3}, "note": "</script><script>alert(1)"}]
    return {"fabric": layout, "period_s": 0.5, "samples": samples,
            "events": [{"t": 0.4, "event": "down", "a": "p0l0", "b": "p0s0"}],
            "src": 0, "dst": 1}


def test_the_page_carries_its_recording_and_nothing_from_outside() -> None:
    page = render(_recording(), title="demo <run>", capacity_bps=2e6)
    assert "demo &lt;run&gt;" in page
    outside = re.findall(r"(?:https?:)?//[\w.-]+", page.replace("http://www.w3.org/2000/svg", ""))
    assert outside == [] and "<link" not in page and " src=" not in page
    data = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page,
                     re.S)
    assert data is not None  # the string with </script> in it did not end the element early
    parsed = json.loads(data.group(1))
    assert parsed["recording"] == _recording() and parsed["capacity_bps"] == 2e6
    assert parsed["live"] is None


def test_the_report_goes_into_a_new_file_only(tmp_path: Path) -> None:
    path = tmp_path / "run.html"
    size = write_report(path, _recording(), title="t")
    assert size == path.stat().st_size > 0
    with pytest.raises(ReportError, match="exists"):
        write_report(path, _recording(), title="t")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "planted.html").symlink_to(victim)
    with pytest.raises(ReportError, match="exists"):
        write_report(tmp_path / "planted.html", _recording(), title="t")
    assert victim.read_text() == "keep"


class _Agent:
    def __init__(self, net: _Net, host: int) -> None:
        self.net, self.host = net, host

    def call(self, cmd: str, **_: object) -> dict:
        if self.net.broken:
            raise AgentError("h0: restarting")
        if cmd == "status":
            return {"qps": {"1": [0x100]}}
        return {"counters": {"rx_data_bytes": self.net.received}}


class _Net:
    """Switch ports count up by 10 frames per sample each way; h1 received 1,000 bytes more."""

    def __init__(self) -> None:
        self.fabric, self.link_log, self.ticks, self.received = FABRIC, [], 0, 0
        self.broken = False

    def agent(self, host: int) -> _Agent:
        return _Agent(self, host)

    def port_sent(self, name: str) -> dict[int, int]:
        return {port: 10 * self.ticks for port in range(1, 5)}

    def port_received(self, name: str) -> dict[int, int]:
        return {port: 5 * self.ticks for port in range(1, 5)}

    def stats(self, host: int, per_ev: bool = False) -> dict:
        self.ticks += 1
        self.received += 1000
        return {"endpoint": {"retransmits": 2},
                "per_ev": {"0x100": {"7": {"plane": 1, "route": "p1s0", "state": "GOOD",
                                           "tx_packets": 4}}}}


def test_the_recorder_turns_counters_into_rates_and_log_into_state() -> None:
    net = _Net()
    rec = RunRecorder(net, 0, 1)
    first = rec.sample()
    assert "pps" not in first and first["evs"] == {"7": [1, "p1s0", "GOOD", 4]}
    net.link_log.append({"time": 0.0, "event": "down", "a": "p0s0", "b": "p0l0"})
    second = rec.sample()
    host_link = next(lk for lk in rec._layout["links"] if lk["a"].startswith("h"))
    # a switch end sends 10 and receives 5 per tick; for a host link that is b -> a
    hp = second["pps"][host_link["id"]]
    assert hp[1] == pytest.approx(2 * hp[0])
    (down,) = second["down"]  # logged as p0s0 - p0l0: named as the fabric draws it
    assert down in {lk["id"] for lk in rec._layout["links"]}
    assert set(down.split("|")) == {"p0l0", "p0s0"}
    assert second["counters"]["retransmits"] == 2 and second["goodput_bps"] > 0
    net.broken = True
    assert rec.sample()["missing"] == "h0: restarting"


def test_the_live_view_serves_this_run_only_on_loopback() -> None:
    """The server, on a fake fabric: the page and the samples need the run's token; a bad
    `since` is refused; samples come in as the recorder takes them."""
    import urllib.error
    import urllib.request

    from topologies.liveview import LOOPBACK, LiveView

    view = LiveView(_Net(), 0, 1, title="t", port=0)
    url = view.start()
    try:
        base, token = url.split("/?token=")
        assert base.startswith(f"http://{LOOPBACK}:") and len(token) >= 32

        def get(path: str) -> bytes:
            with urllib.request.urlopen(base + path, timeout=10) as answer:  # noqa: S310
                return answer.read()

        for path in ("/", "/samples?since=0", f"/samples?since=0&token={token}x"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                get(path)
            assert refused.value.code == 403
        with pytest.raises(urllib.error.HTTPError) as bad:
            get(f"/samples?since=-1&token={token}")
        assert bad.value.code == 400
        assert f'"live":{{"token":"{token}"}}' in get(f"/?token={token}").decode()
        got = json.loads(get(f"/samples?since=0&token={token}"))
        assert len(got["samples"]) >= 1 and got["events"] == []
        later = json.loads(get(f"/samples?since={len(got['samples'])}&token={token}"))
        assert all(s["t"] >= got["samples"][-1]["t"] for s in later["samples"])
    finally:
        view.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)  # noqa: S310 (stopped: nothing listens)


def test_chromium_renders_what_the_live_page_polled() -> None:
    """The live page's script on a fake fabric: after a few polls the EV grid is built from
    the samples, the goodput line drawn, and the page says it is live."""
    from tests.browser import chromium, dump_url
    from topologies.liveview import LiveView

    if chromium() is None:
        pytest.skip("chromium is not installed (apt install chromium; CI installs it)")
    view = LiveView(_Net(), 0, 1, title="t", port=0)
    url = view.start()
    try:
        dom = dump_url(url, budget_ms=3000)
    finally:
        view.stop()
    assert 'class="ev ev-GOOD"' in dom and '<polyline points="' in dom
    assert re.search(r"live: \d+ samples", dom), dom[-2000:]
