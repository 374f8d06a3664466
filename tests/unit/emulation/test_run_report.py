"""The run report (views.runreport, runview): one self-contained page that carries its
recording, written only into a new file; the recorder's arithmetic on a fake fabric."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from emulation.agents import AgentError
from fabric.options import PRESETS
from fabric.topology import Fabric
from p4rt.names import TRIM_COUNTER
from tests.browser import chromium, dump_dom, dump_url
from views.liveview import LOOPBACK, LiveView
from views.runreport import ReportError, render, write_report
from views.runview import RunRecorder, fabric_layout

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)


def _recording() -> dict:
    layout = fabric_layout(FABRIC)
    first = layout["links"][0]["id"]
    n = len(layout["links"])
    samples = [{"t": 0.0, "down": [], "evs": {"4096": ["GOOD", 1]}},
               {"t": 0.5, "down": [first], "pps": [[10, 0]] * n, "goodput_bps": 1e6,
                "marks": {"1": [4.0, 0.0, 0.0, 0.0]}, "evs": {"4096": ["ASSUMED_BAD", 9]},
                "counters": {"retransmits": 3}, "note": "</script><script>alert(1)"}]
    return {"name": "demo", "fabric": layout, "period_s": 0.5, "samples": samples,
            "events": [{"t": 0.4, "event": "down", "a": "p0l0", "b": "p0s0"}],
            "src": 0, "dst": 1, "flows": [[0, 1]], "capacity_bps": 2e6, "goodput": True,
            "evs": {"4096": [0, "p0s0"]}}


def test_the_page_carries_its_recording_and_nothing_from_outside() -> None:
    page = render([_recording()], title="demo <run>")
    assert "demo &lt;run&gt;" in page
    outside = re.findall(r"(?:https?:)?//[\w.-]+", page.replace("http://www.w3.org/2000/svg", ""))
    assert outside == [] and "<link" not in page and " src=" not in page
    data = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page,
                     re.S)
    assert data is not None  # the string with </script> in it did not end the element early
    parsed = json.loads(data.group(1))
    assert parsed["runs"] == [_recording()] and parsed["live"] is None
    with pytest.raises(ReportError, match="at least one"):
        render([], title="t")


def test_the_report_goes_into_a_new_file_only(tmp_path: Path) -> None:
    path = tmp_path / "run.html"
    size = write_report(path, [_recording()], title="t")
    assert size == path.stat().st_size > 0
    with pytest.raises(ReportError, match="exists"):
        write_report(path, [_recording()], title="t")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "planted.html").symlink_to(victim)
    with pytest.raises(ReportError, match="exists"):
        write_report(tmp_path / "planted.html", [_recording()], title="t")
    assert victim.read_text() == "keep"


class _Agent:
    def __init__(self, net: _Net, host: int) -> None:
        self.net, self.host = net, host

    def call(self, cmd: str, **args: object) -> dict:
        if self.net.broken:
            raise AgentError("h0: restarting")
        net = self.net
        if cmd == "view":  # the focus sender, once per sample: the fabric moves on a tick
            net.ticks += 1
            net.received += 1000
            net.trims_seen += 3 * net.trimming
            net.view_calls.append(args)
            ev = ["GOOD", 4, 1, "p1s0"] if args.get("paths") else ["GOOD", 4]
            return {"counters": {"retransmits": 2, **self._counters()}, "qpn": net.qpn,
                    "evs": {net.ev_id: ev}}
        return {"counters": self._counters()}

    def _counters(self) -> dict[str, int]:
        return {"rx_data_bytes": self.net.received, "trims_received": self.net.trims_seen}


class _Net:
    """Switch ports count up by 10 frames sent and 5 received per sample; h1 received 1,000
    bytes more; port 1 of every switch trims 3 packets per sample (and reads as busy)."""

    def __init__(self, rate: int | None = 15) -> None:
        self.fabric, self.link_log, self.ticks, self.received = FABRIC, [], 0, 0
        self.config = SimpleNamespace(port_rate_pps=rate)
        self.broken = False
        self.counter_reads: list[tuple[str, list[int]]] = []
        self.trims_seen, self.trimming = 0, True  # the receivers' count of trims
        self.view_calls: list[dict] = []
        self.qpn, self.ev_id = 0x100, "7"  # the focus QP and its one EV

    def agent(self, host: int) -> _Agent:
        return _Agent(self, host)

    def switch_packet_counts(self) -> dict[str, dict[int, tuple[int, int]]]:
        t = self.ticks
        return {sw.name: {p: (5 * t, (40 if p == 1 else 10) * t) for p in range(1, 5)}
                for sw in self.fabric.switches}

    def switch_counters(self, name: str, counters: tuple[str, ...], ports: list[int]) -> dict:
        self.counter_reads.append((name, ports))
        return {c: {p: (3 * self.ticks if p == 1 and c == TRIM_COUNTER else 0) for p in ports}
                for c in counters}


def test_the_recorder_turns_counters_into_rates_and_log_into_state() -> None:
    net = _Net()
    rec = RunRecorder(net, [(0, 1)], name="t", capacity_bps=1e6)
    first = rec.sample()
    assert "pps" not in first and first["evs"] == {"7": ["GOOD", 4]}
    assert rec.layout()["evs"] == {"7": [1, "p1s0"]}
    rec.sample()
    assert [c["paths"] for c in net.view_calls] == [True, False]  # routes once
    net.link_log.append({"time": 0.0, "event": "down", "a": "p0s0", "b": "p0l0"})
    second = rec.sample()
    links = rec.layout()["fabric"]["links"]
    host = next(i for i, lk in enumerate(links) if lk["a"].startswith("h"))
    # a switch end sends 10 (port 1: 40) and receives 5 per tick; for a host link that is b -> a
    hp = second["pps"][host]
    ratio = (40 if links[host]["b_port"] == 1 else 10) / 5
    assert len(second["pps"]) == len(links) and hp[1] == pytest.approx(ratio * hp[0], rel=0.01)
    (down,) = second["down"]  # logged as p0s0 - p0l0: named as the fabric draws it
    assert set(down.split("|")) == {"p0l0", "p0s0"}
    assert second["counters"]["retransmits"] == 2 and second["goodput_bps"] > 0
    rec.samples.append(rec.sample())  # as the sampling thread keeps them
    net.qpn, net.ev_id = 0x200, "9"  # a fresh QP (the bench's next run): its EVs only
    assert rec.sample()["evs"] == {"9": ["GOOD", 4]}
    assert all("evs" not in s for s in rec.samples)  # the old QP's states are not this run's
    assert rec.layout()["evs"] == {"9": [1, "p1s0"]}  # its routes asked for at once
    net.broken = True
    assert rec.sample()["missing"] == "h0: restarting"


def test_only_busy_ports_are_read_for_trims_and_each_direction_is_its_egress() -> None:
    """Port 1 sends 40 frames a tick, the others 10: at a rate of 15 pps only port 1 is read
    (the rest cannot be queueing), except in the first sample (a baseline for every port)
    and the last; its trims show on the direction leaving that port. A sample in which the
    receivers counted no new trims asks no switch."""
    net = _Net(rate=15)
    rec = RunRecorder(net, [(0, 1)], clock=lambda: float(net.ticks))  # a tick per second
    rec.sample()
    assert {tuple(ports) for _, ports in net.counter_reads} == {(1, 2, 3, 4)}
    net.counter_reads.clear()
    second = rec.sample()
    assert net.counter_reads and all(ports == [1] for _, ports in net.counter_reads)
    links = rec.layout()["fabric"]["links"]
    assert second["marks"], second
    for index, marks in second["marks"].items():
        link = links[int(index)]
        trims_ab, trims_ba = marks[0], marks[1]
        assert trims_ab == (3.0 if link["a_port"] == 1 and not link["a"].startswith("h")
                            else 0.0)
        assert trims_ba == (3.0 if link["b_port"] == 1 else 0.0)
    net.counter_reads.clear()
    net.trimming = False  # the receivers see no new trims: no switch is asked
    rec.sample()
    assert net.counter_reads == []
    rec.sample(last=True)
    assert {tuple(ports) for _, ports in net.counter_reads} == {(1, 2, 3, 4)}
    net_all = _Net(rate=None)  # no port rate: every port is read
    rec_all = RunRecorder(net_all, [(0, 1)], clock=lambda: float(net_all.ticks))
    rec_all.sample()
    rec_all.sample()
    assert {tuple(ports) for _, ports in net_all.counter_reads} == {(1, 2, 3, 4)}


def _serving(view: LiveView, net: _Net) -> RunRecorder:
    recorder = RunRecorder(net, [(0, 1)], name="demo").start()
    view.show(recorder)
    return recorder


def test_the_live_view_serves_this_run_only_on_loopback() -> None:
    """The server, on a fake fabric: the page and the samples need the run's token; a bad
    `since` is refused; samples come in as the recorder takes them; a page of an earlier run
    is told the run number changed (and reloads)."""
    import urllib.error
    import urllib.request

    view = LiveView(title="t", port=0)
    url = view.start()
    recorders = []
    try:
        base, token = url.split("/?token=")
        assert base.startswith(f"http://{LOOPBACK}:") and len(token) >= 32

        def get(path: str) -> bytes:
            with urllib.request.urlopen(base + path, timeout=10) as answer:  # noqa: S310
                return answer.read()

        assert b"waiting for the first run" in get(f"/?token={token}")
        recorders.append(_serving(view, _Net()))
        for path in ("/", "/samples?since=0", f"/samples?since=0&token={token}x"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                get(path)
            assert refused.value.code == 403
        for bad in ("since=-1", "since=x", "run=x"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                get(f"/samples?{bad}&token={token}")
            assert refused.value.code == 400
        assert f'"live":{{"token":"{token}","run":0}}' in get(f"/?token={token}").decode()
        time.sleep(0.2)
        got = json.loads(get(f"/samples?run=0&since=0&token={token}"))
        assert got["run"] == 0 and len(got["samples"]) >= 1 and got["events"] == []
        assert got["evs"] == {"7": [1, "p1s0"]}
        later = json.loads(get(f"/samples?run=0&since={len(got['samples'])}&token={token}"))
        assert all(s["t"] >= got["samples"][-1]["t"] for s in later["samples"])
        recorders.append(_serving(view, _Net()))  # the bench's next contender
        assert json.loads(get(f"/samples?run=0&since=0&token={token}")) == {"run": 1}
    finally:
        view.stop()
        for r in recorders:
            r.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)  # noqa: S310 (stopped: nothing listens)


def test_chromium_renders_what_the_live_page_polled() -> None:
    """The live page's script on a fake fabric: after a few polls the EV grid is built from
    the samples, the goodput line drawn, and the page says it is live."""
    if chromium() is None:
        pytest.skip("chromium is not installed (apt install chromium; CI installs it)")
    view = LiveView(title="t", port=0)
    url = view.start()
    recorder = _serving(view, _Net())
    try:
        deadline = time.monotonic() + 10
        while len(recorder.samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)  # marks need two busy readings after the first sample
        dom = dump_url(url, budget_ms=3000)
    finally:
        view.stop()
        recorder.stop()
    assert 'class="ev ev-GOOD"' in dom and '<polyline points="' in dom
    assert re.search(r"live: \d+ samples", dom), dom[-2000:]
    assert 'class="link link-trim"' in dom  # port 1 of every switch trims


def test_a_bench_report_opens_each_run(tmp_path: Path) -> None:
    """Two runs in one file: the chooser lists both, #run=1 shows the second's fabric."""
    if chromium() is None:
        pytest.skip("chromium is not installed (apt install chromium; CI installs it)")
    first = _recording()
    second = {**_recording(), "name": "loss / roce", "evs": {},
              "samples": [{**s, "evs": {}} for s in _recording()["samples"]]}
    page = tmp_path / "bench.html"
    write_report(page, [first, second], title="bench")
    dom = dump_dom(page, "run=1&sample=1")
    assert '<option value="0">demo</option><option value="1">loss / roce</option>' in dom
    assert "no MRC QP in this run" in dom and 'class="link link-down"' in dom
    assert 'class="ev ev-ASSUMED_BAD"' in dump_dom(page, "run=0&sample=1")


@pytest.mark.parametrize("preset", ["paths-128", "hosts-16"])
def test_the_view_stays_on_one_screen_at_scale(tmp_path: Path, preset: str) -> None:
    """The scale issue's fabrics: planes wrap into panels no wider than the page, hosts past
    MAX_HOSTS are one box per T0, small nodes lose their labels, and the page says so."""
    if chromium() is None:
        pytest.skip("chromium is not installed (apt install chromium; CI installs it)")
    fabric = Fabric(*PRESETS[preset])
    layout = fabric_layout(fabric)
    links = layout["links"]
    evs = {str(i): [i % fabric.planes, f"r{i}"] for i in range(160)}  # an MRC QP: 128 + backups
    samples = [{"t": 0.5 * k, "down": [links[-1]["id"]] if k == 2 else [],
                "pps": [[100 * k, 50] for _ in links], "marks": {"0": [5.0, 0, 0, 0]},
                "evs": {ev: ["GOOD", k] for ev in evs}, "goodput_bps": 1e6,
                "counters": {"retransmits": k}} for k in range(4)]
    rec = {"name": preset, "fabric": layout, "period_s": 0.5, "samples": samples, "events": [],
           "src": 0, "dst": fabric.hosts - 1, "flows": [[0, fabric.hosts - 1]],
           "capacity_bps": 2e6, "goodput": True, "evs": evs}
    page = tmp_path / "scale.html"
    write_report(page, [rec], title=preset)
    dom = dump_dom(page, "sample=2")
    widths = [int(w) for w in re.findall(r'<svg width="(\d+)"', dom)]
    assert widths and max(widths) <= 1280, widths
    drawn = dom.count('<line x1="') - dom.count('class="cursor"')
    host_lines = fabric.planes * (fabric.t0_per_plane if fabric.hosts > 8 else fabric.hosts)
    assert drawn >= fabric.planes * fabric.t0_per_plane * fabric.t1_per_plane + host_lines
    assert dom.count('class="ev ev-GOOD"') == len(evs)
    assert dom.count('class="link link-down"') == 1 and 'class="link link-trim"' in dom
    notes = re.search(r'<p id="notes" class="note">(.*?)</p>', dom).group(1)
    labelled = ">p0s1</text>" in dom
    assert labelled == ("Node names are in the hover text" not in notes)
    assert labelled == (preset != "paths-128")  # 16 T1 a plane do not fit with their names
    assert ("one box per T0" in notes) == (fabric.hosts > 8)
