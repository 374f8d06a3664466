"""Exercise 3, static tables in the controller: the student lists a switch's neighbours in
controller.tables.switch_tables, from which its usid_fwd_table entries are made.

Stages: (1) unit checks of the usid_fwd entries of every switch of several fabrics against
entries derived here from the fabric's cables (fabric.topology.Fabric.links says which port of
a switch faces which node; a switch must forward exactly its neighbours' uSIDs, each out of the
port facing it, to that neighbour's MAC); (2) a reachability walk: every switch gets the
student's full tables in the software switch's pipeline (the P4 program in Python) and a data
frame for every host pair, plane and spine is pushed through it hop by hop along the cables;
(3) the live Mininet transfer.

The sandbox (observe, with ex3_observe) only reports the entities switch_tables returned, in a
canonical JSON form, or what it raised. Every stage runs in the trusted process on the
reported tables, never on the student's module: `judge` derives the expected entries and runs
the walk, and `measure` runs the live transfer on a fabric of the instructor's project whose
controller installs the reported tables of the live fabric's shape. A report that claims
anything else about the live stage is not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grader.challenge import rng
from grader.errors import GraderError
from grader.report import Check, CheckSpec, not_run
from rubrics.ex3_observe import crash_text, entities_from_json, usid_fwd_rows
from rubrics.live import LIVE_FABRIC, judge_transfer, measure_transfer

# Several shapes, so a solution cannot hard-code one: the live fabric, the default one, one
# plane with more spines than T0s, and more T0s than spines with three hosts each.
FABRICS = (
    {"planes": 2, "t0_per_plane": 2, "t1_per_plane": 2, "hosts_per_t0": 1},
    {"planes": 4, "t0_per_plane": 2, "t1_per_plane": 2, "hosts_per_t0": 2},
    {"planes": 1, "t0_per_plane": 2, "t1_per_plane": 4, "hosts_per_t0": 2},
    {"planes": 2, "t0_per_plane": 4, "t1_per_plane": 3, "hosts_per_t0": 3},
)
# Each grading run adds one shape drawn from its challenge (grader.challenge): a report of
# another run's tables lacks it, so a replayed report fails (issue 54).
DRAWN = {"planes": (1, 4), "t0_per_plane": (2, 4), "t1_per_plane": (2, 4),
         "hosts_per_t0": (1, 3)}
Shapes = tuple[dict[str, int], ...]
MAX_HOPS = 6  # a two-tier path crosses at most 3 switches; more is a forwarding loop

HOST, UPLINK, DOWNLINK = "host", "uplink", "downlink"
KIND_TEXT = {HOST: "a T0 towards one of its hosts", UPLINK: "a T0 towards a spine",
             DOWNLINK: "a spine towards a T0"}
TITLES = {
    HOST: "every T0 forwards its hosts' uSIDs out of their host ports",
    UPLINK: "every T0 forwards each spine's uSID out of the uplink facing that spine",
    DOWNLINK: "every spine forwards each T0's uSID out of the downlink facing that T0",
}
ONLY_TITLE = "no usid_fwd entry for a node that is not a neighbour"
REACH_TITLE = "a frame for every host pair, plane and spine reaches its destination NIC"
LIVE_TITLE = "a write crosses a Mininet fabric running your tables"
CHECKS = (*(CheckSpec(f"tables.{kind}", TITLES[kind], 2) for kind in (HOST, UPLINK, DOWNLINK)),
          CheckSpec("tables.only-neighbours", ONLY_TITLE, 1),
          CheckSpec("reach.all-paths", REACH_TITLE, 4),
          CheckSpec("live.transfer", LIVE_TITLE, 4))
Tables = dict[str, Any]  # ex3_observe.observe_tables' report: untrusted in judge


@dataclass(frozen=True)
class Entry:
    """One usid_fwd entry: frames whose next uSID is `usid` leave on `port` to `dmac`."""

    usid: int
    port: int
    dmac: int
    neighbour: str = ""  # for expected entries: the node behind the port
    kind: str = ""


def _mac(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def _shape(fabric: Any) -> str:
    return (f"Fabric(planes={fabric.planes}, t0_per_plane={fabric.t0_per_plane}, "
            f"t1_per_plane={fabric.t1_per_plane}, hosts_per_t0={fabric.hosts_per_t0})")


def shapes(challenge: str) -> Shapes:
    """The fabrics one grading run asks for: FABRICS and one drawn from its challenge."""
    r = rng(challenge, "ex3")
    return (*FABRICS, {key: r.randint(lo, hi) for key, (lo, hi) in DRAWN.items()})


def _fabrics(asked: Shapes) -> list[Any]:
    from fabric.topology import Fabric
    return [Fabric(**shape) for shape in asked]


def expected_entries(fabric: Any) -> dict[str, dict[int, Entry]]:
    """Per switch: uSID -> entry, read off the fabric's cables (not off the controller)."""
    from fabric.topology import ROLE_T0
    from p4rt.program import mac_int

    out: dict[str, dict[int, Entry]] = {s.name: {} for s in fabric.switches}
    for cable in fabric.links:
        for here, port, there, there_port in ((cable.a, cable.a_port, cable.b, cable.b_port),
                                              (cable.b, cable.b_port, cable.a, cable.a_port)):
            if here not in out:
                continue  # a host's end of the cable: hosts hold no tables
            me = fabric.by_name[here]
            if there in fabric.by_name:
                peer = fabric.by_name[there]
                usid, mac = peer.usid, peer.mac
                kind = UPLINK if me.role == ROLE_T0 else DOWNLINK
            else:  # a host: its port number on the cable is its plane
                nic = fabric.nic(int(there.lstrip("h")), there_port)
                usid, mac, kind = nic.usid, nic.mac, HOST
            out[here][usid] = Entry(usid, port, mac_int(mac), there, kind)
    return out


def _reported(tables: Tables,
              asked: Shapes) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The per-fabric entity lists and what switch_tables raised (None: nothing)."""
    fabrics, raised = tables["fabrics"], tables["raised"]
    if not isinstance(fabrics, list) or not all(isinstance(f, dict) for f in fabrics):
        raise TypeError("the reported fabrics are not a list of {switch: entities}")
    if raised is not None and not isinstance(raised, dict):
        raise TypeError("'raised' is neither null nor {switch, error}")
    if raised is None and len(fabrics) != len(asked):
        raise ValueError(f"{len(fabrics)} fabrics reported, expected {len(asked)}")
    return fabrics, raised


def _usid_fwd(items: Any, switch: str) -> list[Entry]:
    """A switch's reported usid_fwd entries, keyed by the uSID in their prefix."""
    from fabric.topology import USID_BITS

    return [Entry(prefix & ((1 << USID_BITS) - 1), port, dmac)
            for prefix, port, dmac in usid_fwd_rows(entities_from_json(items, switch))]


def _describe(u: int) -> str:
    plane, role, index = u >> 12, u >> 8 & 0xF, u & 0xFF
    what = {0x1: f"T0 p{plane}l{index}", 0x2: f"spine p{plane}s{index}",
            0xE: f"host h{index} on plane {plane}"}.get(role, f"role {role:#x} index {index}")
    return f"uSID {u:#06x} ({what})"


@dataclass
class _Findings:
    """Per kind of entry, the problems found over every switch of every fabric."""

    problems: dict[str, list[str]]
    extras: list[str]
    checked: dict[str, int]
    crash: str = ""


def _compare_switch(found: _Findings, where: str, switch: str, got: list[Entry],
                    want: dict[int, Entry]) -> None:
    """Adds to `found` what one switch's entries `got` miss, get wrong or hold beyond `want`."""
    seen: dict[int, Entry] = {}
    for e in got:
        if e.usid in seen:
            found.extras.append(f"{where}: two entries for {_describe(e.usid)} (ports "
                                f"{seen[e.usid].port} and {e.port})")
        seen[e.usid] = e
        if e.usid not in want:
            found.extras.append(f"{where}: entry for {_describe(e.usid)} -> port "
                                f"{e.port}, which is not a neighbour of {switch}")
    for u, w in want.items():
        found.checked[w.kind] += 1
        e = seen.get(u)
        if e is None:
            found.problems[w.kind].append(
                f"{where}: no entry for {_describe(u)}; expected port {w.port} "
                f"(towards {w.neighbour}, dmac {_mac(w.dmac)})")
        elif e.port != w.port:
            found.problems[w.kind].append(
                f"{where}: {_describe(u)} leaves on port {e.port}, expected port "
                f"{w.port} (the port facing {w.neighbour})")
        elif e.dmac != w.dmac:
            got_mac = _mac(e.dmac) if 0 <= e.dmac < 1 << 48 else str(e.dmac)
            found.problems[w.kind].append(
                f"{where}: {_describe(u)} gets dmac {got_mac}, expected "
                f"{_mac(w.dmac)} ({w.neighbour}'s MAC)")


def compare(tables: Tables, asked: Shapes = FABRICS) -> _Findings:
    """The reported usid_fwd entries against the cables, switch by switch in the order of the
    fabrics `asked`, up to the switch whose switch_tables raised, if one did."""
    found = _Findings({HOST: [], UPLINK: [], DOWNLINK: []}, [], dict.fromkeys(KIND_TEXT, 0))
    fabrics, raised = _reported(tables, asked)
    crash = "" if raised is None else \
        f"switch_tables({str(raised['switch'])[:80]}) raised {str(raised['error'])[:2000]}"
    for fabric, reported in zip(_fabrics(asked), fabrics, strict=False):
        want_all = expected_entries(fabric)
        for switch in fabric.switches:
            if crash and switch.name not in reported:
                break  # the switch that raised: nothing after it was observed
            got = _usid_fwd(reported[switch.name], switch.name)
            _compare_switch(found, f"{switch.name} of {_shape(fabric)}", switch.name, got,
                            want_all[switch.name])
    found.crash = crash
    return found


HINTS = {
    HOST: "a T0's host-facing ports are fabric.host_port(local) = local + 1 for the hosts "
          "switch.index * hosts_per_t0 ... + hosts_per_t0 - 1; the uSID and MAC are those of "
          "the host's NIC on the switch's plane (fabric.nic(host, plane).usid / .mac)",
    UPLINK: "a T0 has one uplink per spine of its plane: spine j is fabric.t1(plane, j) behind "
            "fabric.uplink_port(j); loop over every j in range(fabric.t1_per_plane)",
    DOWNLINK: "a spine has one downlink per T0 of its plane: T0 k is fabric.t0(plane, k) behind "
              "fabric.downlink_port(k) (= k + 1); the port depends on the T0, not on the spine",
}


def _unit_checks(found: _Findings, fabrics: int) -> Iterator[Check]:
    for kind in (HOST, UPLINK, DOWNLINK):
        cid, title = f"tables.{kind}", TITLES[kind]
        expected = (f"{found.checked[kind]} entries of {KIND_TEXT[kind]} over {fabrics} "
                    f"fabrics, each to the right port and MAC")
        if found.crash:
            yield Check(cid, title, 2, False, expected=expected, observed=found.crash,
                        hint="fill in the neighbours list of switch_tables (the TODO in "
                             "controller/tables.py); the traceback's last line says what failed")
            continue
        bad = found.problems[kind]
        observed = "all present and right" if not bad else \
            f"{len(bad)} wrong or missing, e.g. {bad[0]}"
        yield Check(cid, title, 2, not bad, expected=expected, observed=observed,
                    hint="" if not bad else HINTS[kind])
    cid, title = "tables.only-neighbours", ONLY_TITLE
    if found.crash:
        yield not_run(cid, title, 1, "switch_tables raised (see above)")
        return
    yield Check(cid, title, 1, not found.extras,
                expected="only the uSIDs of the switch's directly cabled neighbours, once each",
                observed="none" if not found.extras else
                f"{len(found.extras)} extra entries, e.g. {found.extras[0]}",
                hint="" if not found.extras else
                "uSID forwarding is one hop at a time: a switch only needs the uSIDs of the "
                "nodes cabled to it (a host's uSID only on its own T0 and plane); the uN shift "
                "brings the next hop's uSID up at every switch")


def table_checks(tables: Tables, asked: Shapes = FABRICS) -> list[Check]:
    """Stage 1's verdicts on the reported tables."""
    return list(_unit_checks(compare(tables, asked), len(asked)))


def tables_pass(tables: Tables, asked: Shapes = FABRICS) -> bool:
    """Stage 1 passed: the sandbox uses it to skip the stages the judge would not run."""
    return all(c.passed for c in table_checks(tables, asked))


# ---- stage 2: the walk through the software pipeline ----------------------------------------
class _Refused(GraderError):
    """A switch would not take the reported tables: the text says which and why."""


def _programmed(fabric: Any, reported: dict[str, Any]) -> dict[str, Any]:
    """A software-switch pipeline per switch, holding the reported tables (the project's own
    pipeline, run here: the report's entities are data, checked by the switch as it writes)."""
    from p4rt.codec import Codec
    from softswitch.pipeline import Pipeline
    from softswitch.store import DeviceState

    codec = Codec.committed()
    out = {}
    for switch in fabric.switches:
        entities = entities_from_json(reported[switch.name], switch.name)  # malformed: raises
        state = DeviceState(codec.index)
        try:  # what the codec refuses, the controller could not have written either
            updates = [codec.update("INSERT", e) for e in entities]
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            raise _Refused(f"{_shape(fabric)}: {crash_text(exc)}") from None
        errors = [e for e in state.write(updates) if e is not None]
        if errors:
            refused = ValueError(f"{switch.name}: the switch refused the tables: {errors[0]}")
            raise _Refused(f"{_shape(fabric)}: {crash_text(refused)}")
        out[switch.name] = Pipeline(state)
    return out


def _frame(path: Any, t0_mac: str) -> bytes:
    import wire as W

    env = W.Envelope(path.src.mac, t0_mac, path.src.address, path.address, path.src.address,
                     path.dst.address, 0x1234, W.DSCP_TRIMMABLE, W.ECN_ECT0, 64)
    pkt = W.DataPacket(W.Bth(W.OP_WRITE_ONLY, 0x100, 1), W.Meth(1), W.Reth(0x1000, 7, 64),
                       b"\x5a" * 64, None)
    return W.encode_frame(env, W.encode_packet(pkt))


def _walk(fabric: Any, pipes: dict[str, Any], path: Any) -> str:
    """'' if the frame of `path` reaches its destination NIC, else what happened to it."""
    from p4rt import names as N

    reasons = {v: k for k, v in N.DROP_REASONS.items()}
    ends: dict[tuple[str, int], tuple[str, int]] = {}
    for c in fabric.links:
        ends[(c.a, c.a_port)] = (c.b, c.b_port)
        ends[(c.b, c.b_port)] = (c.a, c.a_port)
    t0 = fabric.t0(path.plane, path.src.t0)
    node, port = t0.name, fabric.host_port(path.src.local)
    frame, trail = _frame(path, t0.mac), [f"h{path.src.host}"]
    for _ in range(MAX_HOPS):
        trail.append(node)
        pipe = pipes[node]
        before = [c[0] for c in pipe.drops]
        result = pipe.ingress(frame, port)
        if result is None:
            why = [reasons.get(i, str(i)) for i, c in enumerate(pipe.drops) if c[0] > before[i]]
            return f"{' -> '.join(trail)}: dropped at {node} ({', '.join(why) or 'dropped'})"
        out_port, _prio, frame = result
        nxt = ends.get((node, out_port))
        if nxt is None:
            return (f"{' -> '.join(trail)}: {node} sent it out of port {out_port}, which has "
                    f"no cable")
        node, port = nxt
        if node not in pipes:  # a host
            if (node, port) == (f"h{path.dst.host}", path.plane):
                return ""
            return (f"{' -> '.join(trail)} -> {node}: delivered to {node} on plane {port}, "
                    f"expected h{path.dst.host} on plane {path.plane}")
    return f"{' -> '.join(trail)}: still forwarded after {MAX_HOPS} switches (a loop)"


def reach_check(tables: Tables, asked: Shapes = FABRICS) -> Check:
    """Stage 2's verdict: every path of the larger fabrics walked through the reported
    tables (the live fabric's paths are covered by the larger shapes)."""
    cid, title = "reach.all-paths", REACH_TITLE
    failures: list[str] = []
    total = 0
    fabrics, _raised = _reported(tables, asked)
    for fabric, reported in list(zip(_fabrics(asked), fabrics, strict=False))[1:]:
        try:
            pipes = _programmed(fabric, reported)
        except _Refused as exc:
            return Check(cid, title, 4, False, expected="the switches accept the tables",
                         observed=str(exc),
                         hint="each table key may appear once per switch: a duplicate uSID "
                              "entry is refused like on a real switch")
        for src in range(fabric.hosts):
            for dst in range(fabric.hosts):
                if src == dst:
                    continue
                for path in fabric.all_paths(src, dst):
                    total += 1
                    why = _walk(fabric, pipes, path)
                    if why:
                        failures.append(
                            f"{_shape(fabric)} h{src} -> h{dst} plane {path.plane} "
                            f"{'same T0' if path.spine is None else f'spine {path.spine}'} "
                            f"(DA {path.address}): {why}")
    return Check(cid, title, 4, not failures,
                 expected=f"all {total} paths deliver to the destination host's NIC on the "
                          f"path's plane",
                 observed="all delivered" if not failures else
                 f"{len(failures)} of {total} paths fail, e.g. {failures[0]}",
                 hint="" if not failures else
                 "follow the trail: the switch named last dropped the frame or sent it to the "
                 "wrong neighbour; UNKNOWN_USID means its usid_fwd table lacks the next uSID")


def observe(ctx: Any) -> dict[str, Any]:
    """In the sandbox: the student's tables for every shape this run asks."""
    from rubrics.ex3_observe import observe_tables

    return {"tables": observe_tables(shapes(ctx.challenge))}


def live_tables(tables: Tables, asked: Shapes) -> dict[str, Any]:
    """The reported tables of the live fabric's shape as the controller installs them
    (switch name -> SwitchTables); ValueError when the report lacks one or holds what the
    controller never writes."""
    from controller.tables import SwitchTables
    from fabric.topology import Fabric
    from p4rt.entities import Group, Member, TableEntry

    fabric = Fabric(**LIVE_FABRIC)
    fabrics, _raised = _reported(tables, asked)  # tables_pass: nothing raised, all there
    reported = fabrics[asked.index(LIVE_FABRIC)]
    out = {}
    for switch in fabric.switches:
        entities = entities_from_json(reported.get(switch.name), switch.name)
        kinds = (Member, Group, TableEntry)
        if not all(isinstance(e, kinds) for e in entities):
            raise ValueError(f"{switch.name}: the controller writes entries, members and "
                             "groups only")
        out[switch.name] = SwitchTables(
            switch, *(tuple(e for e in entities if isinstance(e, k)) for k in kinds))
    return out


def measure(obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Here, never in the sandbox: the live transfer with the reported tables, when the
    stages before it pass ({} otherwise: judge says why it was not run)."""
    tables, asked = obs["tables"], shapes(ctx.challenge)
    if not (tables_pass(tables, asked) and reach_check(tables, asked).passed):
        return {}
    return {"live": measure_transfer(ctx.target, live_tables(tables, asked))}


def judge(obs: dict[str, Any], ctx: Any) -> Iterator[Check]:
    """Every check, from the reported tables alone; later stages are not run when an
    earlier one fails."""
    tables, asked = obs["tables"], shapes(ctx.challenge)
    units = table_checks(tables, asked)
    yield from units
    if not all(c.passed for c in units):
        yield not_run("reach.all-paths", REACH_TITLE, 4, "fix the table checks above first")
        yield not_run("live.transfer", LIVE_TITLE, 4, "fix the table checks above first")
        return
    reach = reach_check(tables, asked)
    yield reach
    if not reach.passed:
        yield not_run("live.transfer", LIVE_TITLE, 4, "fix the reachability check first")
        return
    yield judge_transfer((ctx.measured or {}).get("live"), ctx.target, "live.transfer", 4,
                         hint="the tables pass the checks above, so look at the controller's "
                              "log in the report: did every switch accept its entries?")
