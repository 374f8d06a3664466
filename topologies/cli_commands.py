"""Mininet CLI with MRC experiment commands (opened by two_tier.py after the demo).

    mrc_write SRC DST BYTES [single]   verified RDMA write between hosts (indices or h0-style)
    mrc_link down|up A B               take a cable down/up (e.g. p0l0 p0s1)
    mrc_link cut A B                   cut a cable between servers: ends stay up (up mends)
    mrc_reboot SWITCH                  kill a switch process, restart it, reinstall its tables
    mrc_nic down|up HOST PLANE         take a host NIC (one plane) down/up
    mrc_stats [HOST]                   agent counters (all hosts when HOST is omitted)
    mrc_capture LINK SECONDS FILE      pcap of a link (A-B or "A B"), for Wireshark/tshark
    mrc_web [PORT]                     the live view's address (started on 127.0.0.1 if off)
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path

from mininet.cli import CLI

from emulation.agents import AgentError
from emulation.network import MrcNetwork, NetworkError
from host_agent.cli import format_stats
from views.liveview import DEFAULT_WEB_PORT, LiveViewError, start_view

USAGE = __doc__.split("\n\n", 1)[1]


class MrcCLI(CLI):
    prompt = "mrc> "

    def __init__(self, mrc: MrcNetwork, views: ExitStack | None = None, **kwargs) -> None:
        self.mrc = mrc  # set before CLI.__init__, which runs the command loop (or script=)
        self.failures = 0  # commands that failed: a script's caller exits non-zero
        self.views = views  # closes the live view mrc_web starts (two_tier.py owns it)
        self.view_url: str | None = None
        super().__init__(mrc.net, **kwargs)

    def _run(self, line: str, usage: str, fn) -> None:
        try:
            fn(line.split())
        except (ValueError, IndexError, KeyError):
            self.failures += 1
            print(f"usage: {usage}", file=sys.stderr)
        except (NetworkError, AgentError, LiveViewError) as exc:
            self.failures += 1
            print(f"error: {exc}", file=sys.stderr)

    def _host(self, word: str) -> int:
        return int(word[1:] if word.startswith("h") else word)

    def do_mrc_write(self, line: str) -> None:
        """mrc_write SRC DST BYTES [single]: RDMA write, verified byte for byte."""
        def run(w: list[str]) -> None:
            r = self.mrc.transfer(self._host(w[0]), self._host(w[1]), int(w[2]),
                                  single_path=len(w) > 3 and w[3] == "single")
            if not r["ok"]:
                self.failures += 1
                print(f"FAILED: {r.get('error')}")
                return
            print(f"{r['bytes']} bytes h{r['src']} -> h{r['dst']} verified in "
                  f"{r['duration_s']:.3f} s: {r['goodput_bps'] / 1e6:.2f} Mbit/s; retransmits "
                  f"{r['retransmits']}, timeouts {r['timeouts']}, NACKs {r['nacks']}, "
                  f"trims {r['trims']}")
        self._run(line, "mrc_write SRC DST BYTES [single]", run)

    def do_mrc_link(self, line: str) -> None:
        """mrc_link down|up|cut A B: take the cable between nodes A and B down or up, or cut
        it (a cable between servers: both ends stay up, its frames are lost)."""
        def run(w: list[str]) -> None:
            verb = w[0].lower()
            {"down": self.mrc.link_down, "up": self.mrc.link_up,
             "cut": self.mrc.link_cut}[verb](w[1], w[2])
            event = self.mrc.link_log[-1]
            mended = f" (the cut dropped {event['cut_dropped']} frames)" \
                if "cut_dropped" in event else ""
            print(f"link {w[1]} - {w[2]} {verb}{mended}")
        self._run(line, "mrc_link down|up|cut A B", run)

    def do_link(self, line: str) -> None:
        """link A B down|up: Mininet's own command, routed to mrc_link. Mininet's version
        takes both interfaces down, which BMv2 never recovers from (emulation/network.py)."""
        def run(w: list[str]) -> None:
            self.do_mrc_link(f"{w[2]} {w[0]} {w[1]}")
        self._run(line, "link A B down|up", run)

    def do_mrc_nic(self, line: str) -> None:
        """mrc_nic down|up HOST PLANE: take one host NIC down or up."""
        def run(w: list[str]) -> None:
            fn = {"down": self.mrc.nic_down, "up": self.mrc.nic_up}[w[0].lower()]
            fn(self._host(w[1]), int(w[2]))
            print(f"h{self._host(w[1])} plane {w[2]} NIC {w[0].lower()}")
        self._run(line, "mrc_nic down|up HOST PLANE", run)

    def do_mrc_reboot(self, line: str) -> None:
        """mrc_reboot SWITCH: kill and restart a switch; the controller reinstalls it."""
        def run(w: list[str]) -> None:
            print(f"{w[0]} rebooted and reprogrammed in {self.mrc.reboot_switch(w[0]):.2f} s")
        self._run(line, "mrc_reboot SWITCH", run)

    def do_mrc_stats(self, line: str) -> None:
        """mrc_stats [HOST] [json]: agent counters, per plane and per EV state."""
        def run(w: list[str]) -> None:
            hosts = [self._host(w[0])] if w and w[0] != "json" else sorted(self.mrc.agents)
            for h in hosts:
                stats = self.mrc.stats(h)
                print(f"--- h{h}")
                print(json.dumps(stats) if "json" in w else format_stats(stats))
        self._run(line, "mrc_stats [HOST] [json]", run)

    def do_mrc_capture(self, line: str) -> None:
        """mrc_capture LINK SECONDS FILE: capture the link A-B (or A B) for SECONDS into the
        new pcap FILE; decode it with docs/wireshark/mrc.lua."""
        def run(w: list[str]) -> None:
            ends = w[0].split("-", 1) if "-" in w[0] else [w[0], w.pop(1)]
            seconds, path = float(w[1]), Path(w[2])
            frames = self.mrc.capture(ends[0], ends[1], seconds, path)
            print(f"{frames} frames of {ends[0]} - {ends[1]} in {path}; decode with: tshark "
                  f"-X lua_script:docs/wireshark/mrc.lua -o udp.try_heuristic_first:TRUE "
                  f"-r {path}")
        self._run(line, "mrc_capture LINK SECONDS FILE", run)

    def do_mrc_web(self, line: str) -> None:
        """mrc_web [PORT]: the live view's address; starts it on 127.0.0.1:PORT if it is not
        running (it stops with the fabric)."""
        def run(w: list[str]) -> None:
            if self.view_url is None:
                if self.views is None:
                    raise NetworkError("no live view here: start two_tier.py with --web")
                port = int(w[0]) if w else DEFAULT_WEB_PORT
                self.view_url = start_view(self.mrc, self.views, port)
            print(f"live view: {self.view_url}")
        self._run(line, "mrc_web [PORT]", run)

    def do_mrc_help(self, _line: str) -> None:
        """mrc_help: the MRC commands."""
        print(USAGE)
