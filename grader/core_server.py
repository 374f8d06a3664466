"""In the sandbox: the student's endpoints, served to a stage the grader runs itself.

    python -m grader.core_server      (started by grader.remote_core, never by hand)

The grader's simulator (grader.remote_core) owns the fabric, the clock and every measurement;
this process only holds Endpoint objects built from the grading copy, where the student's
regions are, and answers grader.core_pipe's requests on them. Whatever this process says is
untrusted on the other side: a forged reply can at worst fail the student's own stage.

The protocol's output is a private copy of stdout; fd 1 itself is pointed at stderr first,
so a print() in the student's code lands in the log instead of breaking a reply.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from grader import core_pipe


def _crash(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 3)[-1]}:{tb[-1].lineno}" if tb else ""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return f"{text}{where}"


class Served:
    """The endpoints of one session, by handle, with each one's route book."""

    def __init__(self) -> None:
        self.endpoints: dict[int, Any] = {}
        self.routes: dict[int, dict[int, Any]] = {}  # handle -> route index -> PathInfo

    def new(self, req: dict[str, Any]) -> Any:
        from host_agent.core import Endpoint
        from host_agent.modes import AgentMode
        from sim.harness import endpoint_config

        mode = AgentMode.parse(req["contender"], req["planes"])
        config = endpoint_config(mode, req["planes"], req["rate_bps"], req["rtt"])
        ep = Endpoint(config, planes=req["planes"], name=req["name"], seed=req["seed"])
        self.endpoints[req["h"]] = ep
        self.routes[req["h"]] = {}
        return ep

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op not in core_pipe.OPS:
            raise ValueError(f"unknown op {op!r}")
        if op == "new":
            ep = self.new(req)
            return {"timer": ep.get_timer()}
        ep = self.endpoints[req["h"]]
        reply: dict[str, Any] = {}
        if op == "connect":
            self._connect(ep, req)
        elif op == "disconnect":
            ep.disconnect(req["qpn"])
        elif op == "register":
            region = ep.register_memory(req["size"])
            reply.update(va=region.va, rkey=region.rkey)
        elif op == "post_write":
            ep.post_write(req["qpn"], core_pipe.unpack(req["data"], 1 << 30), req["va"],
                          req["rkey"], imm=req["imm"], now=req["now"])
        elif op == "receive":
            from host_agent.core import RxMeta

            peer, plane, ev, dscp, ecn = req["meta"]
            ep.receive_packet(core_pipe.unpack(req["data"], 1 << 16),
                              RxMeta(peer, plane, ev, dscp, ecn), now=req["now"])
        elif op == "timer":
            ep.handle_timer(now=req["now"])
        elif op == "plane":
            ep.set_plane_up(req["plane"], req["up"], now=req["now"])
        elif op == "pump":
            reply.update(self._pump(ep, req))
        elif op == "stats":
            reply["stats"] = {k: v for k, v in ep.stats().items() if type(v) is int}
        else:  # ev_states
            reply["states"] = [[ev, s.name] for ev, s in ep.ev_states(req["qpn"]).items()]
        reply["timer"] = ep.get_timer()
        return reply

    def _connect(self, ep: Any, req: dict[str, Any]) -> None:
        from host_agent.core import PathInfo

        book = self.routes[req["h"]]
        paths = []
        for plane, index in req["paths"]:
            book.setdefault(index, PathInfo(plane, index))
            paths.append(book[index])
        ep.connect(req["peer"], req["local_qpn"], req["remote_qpn"], paths,
                   initial_psn=req["initial_psn"], expected_psn=req["expected_psn"])

    def _pump(self, ep: Any, req: dict[str, Any]) -> dict[str, Any]:
        tx = [[p.route, p.ev, p.dscp, p.ecn, core_pipe.pack(p.payload)]
              for p in ep.packets_to_send(now=req["now"])]
        events = []
        event = ep.next_event()
        while event is not None and len(events) < core_pipe.MAX_EVENTS:
            events.append(core_pipe.encode_event(event))
            event = ep.next_event()
        return {"tx": tx, "events": events}


def main() -> int:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    served = Served()
    for raw in sys.stdin.buffer:
        try:
            reply = core_pipe.line(served.handle(core_pipe.parse(raw)))
        except Exception as exc:  # the student's code may raise anything: the grader says so
            reply = core_pipe.line({"raised": _crash(exc)})
        out.write(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
