"""In the sandbox: the student's endpoints, served to a stage the grader runs itself.

    python -m rubrics.core_server      (started by rubrics.remote_core, never by hand)

The grader's simulator (rubrics.remote_core) owns the fabric, the clock and every measurement;
this process only holds Endpoint objects built from the grading copy, where the student's
regions are, and answers served_core.codec's requests on them. Whatever this process says is
untrusted on the other side: a forged reply can at worst fail the student's own stage.

The protocol's output is a private copy of stdout; fd 1 itself is pointed at stderr first,
so a print() in the student's code lands in the log instead of breaking a reply.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from grader.report import raised
from served_core import codec as codec


class Served:
    """The endpoints of one session, by handle, with each one's route book."""

    def __init__(self) -> None:
        self.endpoints: dict[int, Any] = {}
        self.routes: dict[int, dict[int, Any]] = {}  # handle -> route index -> PathInfo

    def new(self, req: dict[str, Any]) -> Any:
        """An endpoint configured as the simulator's hosts are ("sim") or as an agent is
        ("agent"), by the project's own functions, from the parameters the grader sent."""
        from host_agent.core import Endpoint
        from host_agent.modes import AgentMode

        if req["kind"] == "sim":
            from sim.harness import endpoint_config

            mode = AgentMode.parse(req["contender"], req["planes"])
            config = endpoint_config(mode, req["planes"], req["rate_bps"], req["rtt"])
        else:
            from host_agent.agent import agent_endpoint_config

            config = agent_endpoint_config(AgentMode.parse(req["mode"], req["planes"]),
                                           req["base_rtt"], req["line_rate_bps"],
                                           req["write_timeout"])
        ep = Endpoint(config, planes=req["planes"], name=req["name"], seed=req["seed"])
        self.endpoints[req["h"]] = ep
        self.routes[req["h"]] = {}
        return ep

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op not in codec.OPS:
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
        elif op == "deregister":
            ep.deregister_memory(req["rkey"])
        elif op == "post_write":
            reply["wr_id"] = ep.post_write(req["qpn"], codec.unpack(req["data"], 1 << 30),
                                           req["va"], req["rkey"], imm=req["imm"],
                                           now=req["now"])
        elif op == "receive":
            from host_agent.core import RxMeta

            peer, plane, ev, dscp, ecn = req["meta"]
            ep.receive_packet(codec.unpack(req["data"], 1 << 16),
                              RxMeta(peer, plane, ev, dscp, ecn), now=req["now"])
        elif op == "timer":
            ep.handle_timer(now=req["now"])
        elif op == "plane":
            ep.set_plane_up(req["plane"], req["up"], now=req["now"])
        elif op == "pump":
            reply.update(self._pump(ep, req))
        else:
            reply.update(self._figures(ep, op, req))
        reply["timer"] = ep.get_timer()
        return reply

    def _figures(self, ep: Any, op: str, req: dict[str, Any]) -> dict[str, Any]:
        """Counters, state and management: shown by the agent, never graded."""
        if op == "counters":
            return {"counters": ep.counters()}
        if op == "stats":
            stats = ep.stats()
            per_ev = [[q, [[ev, row["plane"], row["state"]] for ev, row in table.items()]]
                      for q, table in stats.get("per_ev", {}).items()]
            return {"stats": {k: v for k, v in stats.items() if type(v) is int},
                    "per_ev": per_ev}
        if op == "ev_states":
            return {"states": [[ev, s.name] for ev, s in ep.ev_states(req["qpn"]).items()]}
        if op == "deny":
            ep.set_ev_denied(req["qpn"], req["ev"], req["denied"])
            return {}
        return {"planes": sorted(ep.peer_planes_up(req["peer"]))}  # peer_planes

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
        tx = [[p.route, p.ev, p.dscp, p.ecn, codec.pack(p.payload)]
              for p in ep.packets_to_send(now=req["now"])]
        events = []
        event = ep.next_event()
        while event is not None and len(events) < codec.MAX_EVENTS:
            events.append(codec.encode_event(event))
            event = ep.next_event()
        return {"tx": tx, "events": events}


def main() -> int:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    served = Served()
    for raw in sys.stdin.buffer:
        try:
            reply = codec.line(served.handle(codec.parse(raw)))
        except Exception as exc:  # the student's code may raise anything: the grader says so
            reply = codec.line({"raised": raised(exc)})
        out.write(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
