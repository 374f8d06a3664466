"""Soak: a live fabric under hostile input and faults, with transfers that must still verify.

    sudo .venv/bin/python -m bench.costs.soak [--frames N] [--flap-hz F] [--flap-s S] [--quick]
        [--target auto|bmv2|soft] [--json [FILE]]

Phases, each with transfers h0 -> h3 running and verified byte for byte at the receiver:
1. mutated: N mutated MRC frames straight into h3's agent (sent out of its T0's port) and N
   into h1's T0 (sent from h1's NIC), bench/inject.py;
2. flap: the busiest plane-0 uplink of h0's T0 goes down and up at F Hz for S seconds;
3. kill-switch: a spine switch crashes mid-transfer (MrcNetwork.kill_switch: kill -9 of its
   BMv2 process; a software switch detached from its shared process, the others forwarding
   on), then restart and reinstall it;
4. kill-agent: kill -9 of the receiving agent mid-transfer and a fresh agent started in its
   place; the interrupted write must end with an error well before its timeout, and
   transfers both ways must then verify without restarting the sender (the fresh agent is
   reconnected out of band, MrcNetwork.reconnect_agent).
Reports inputs tried, faults injected, transfers verified, processes that died, what the
fabric left behind after its teardown (recorded PIDs still alive, interfaces, the manifest),
the resident memory of the switch that took the mutated frames before and after, and prints
one JSON object: the summary, or with --json everything (--json FILE: everything to FILE).
Exit status 0 only if every transfer verified, nothing crashed and nothing was left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from emulation.agents import AgentError
from emulation.network import MrcNetwork, NetworkConfig, NetworkError
from fabric.options import add_json_arg, add_target_arg, json_to_stdout, write_json
from fabric.topology import Fabric
from safety.runstate import manifest_path, same_process

SRC, DST, NOISE_SRC, PLANE = 0, 3, 1, 0
INJECT_TIMEOUT_S = 600
KILLED_WRITE_TIMEOUT_S = 60.0  # the interrupted write must end long before this


@dataclass(frozen=True)
class SoakConfig:
    frames: int = 100_000
    flap_hz: float = 5.0
    flap_s: float = 60.0
    transfer_bytes: int = 4 * 1024 * 1024
    target: str = "auto"


def rss_kib(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _inject_cmd(fabric: Fabric, ifname: str, count: int, seed: int, src: int, dst: int,
                qpn: int) -> list:
    return [sys.executable, "-m", "bench.inject", "--ifname", ifname, "--count", str(count),
            "--seed", str(seed), "--src", str(src), "--dst", str(dst), "--plane", str(PLANE),
            "--qpn", str(qpn),
            "--planes", str(fabric.planes), "--t0", str(fabric.t0_per_plane),
            "--t1", str(fabric.t1_per_plane), "--hosts-per-t0", str(fabric.hosts_per_t0)]


def _finish(proc: subprocess.Popen) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=INJECT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        return {"error": (err or b"").decode(errors="replace")[-500:]}
    return json.loads(out.decode().strip().splitlines()[-1])


def _transfers_until(net: MrcNetwork, stop: threading.Event, nbytes: int) -> list[dict]:
    """Back-to-back verified transfers h0 -> h3 until `stop` is set (at least one)."""
    results: list[dict] = []
    while True:
        try:
            results.append(net.transfer(SRC, DST, nbytes, timeout=120))
        except (AgentError, NetworkError) as exc:  # a failed transfer, reported as one
            results.append({"ok": False, "verified": False, "error": str(exc)})
            return results
        if stop.is_set():
            return results


def phase_mutated(net: MrcNetwork, cfg: SoakConfig) -> dict[str, Any]:
    fabric = net.fabric
    dst_nic, noise_nic = fabric.nic(DST, PLANE), fabric.nic(NOISE_SRC, PLANE)
    dst_t0 = fabric.t0(PLANE, dst_nic.t0).name
    noise_t0 = fabric.t0(PLANE, noise_nic.t0).name
    agent_pid, switch_pid = net.agent_pid(DST), net.switch_pid(noise_t0)
    qpn = net.agent(DST).call("status")["qps"][str(NOISE_SRC)][0]  # h3's QP for h1: exchanged
    rss_before = rss_kib(switch_pid)
    malformed_before = _agent_refused(net)
    stop = threading.Event()
    out: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: out.update(runs=_transfers_until(
        net, stop, cfg.transfer_bytes)), daemon=True)
    worker.start()
    procs: list[subprocess.Popen] = []
    try:
        procs.append(subprocess.Popen(  # root namespace: out of the T0's port, into h3's NIC
            _inject_cmd(fabric, f"{dst_t0}-eth{fabric.host_port(dst_nic.local)}", cfg.frames,
                        1, NOISE_SRC, DST, qpn), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        procs.append(net.host(NOISE_SRC).popen(  # h1's namespace: into its T0's port
            _inject_cmd(fabric, noise_nic.ifname, cfg.frames, 2, NOISE_SRC, DST, qpn),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        sent = {"agent": _finish(procs[0]), "switch": _finish(procs[1])}
    finally:
        for proc in procs:  # on an error or Ctrl-C: by PID, never by name
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stop.set()
        worker.join(300)
    return {"frames": sent, "transfers": out.get("runs", []),
            "agent_alive": alive(agent_pid), "switch_alive": alive(switch_pid),
            "switch": noise_t0, "switch_rss_kib": [rss_before, rss_kib(switch_pid)],
            "agent_refused": _agent_refused(net) - malformed_before}


def _agent_refused(net: MrcNetwork) -> int:
    """Frames h3's agent dropped, wherever: kernel buffer, frame checks, or the endpoint."""
    stats = net.stats(DST)
    frames = sum(int(c.get(k, 0)) for c in stats["driver"].values()
                 for k in ("rx_malformed", "rx_non_mrc", "rx_unknown_peer", "rx_kernel_drops"))
    return frames + sum(int(stats["endpoint"][k]) for k in ("malformed", "answers_refused"))


def phase_flap(net: MrcNetwork, cfg: SoakConfig) -> dict[str, Any]:
    fabric = net.fabric
    t0 = fabric.t0(PLANE, fabric.nic(SRC, PLANE).t0).name
    spine = fabric.t1(PLANE, 0).name
    stop = threading.Event()
    out: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: out.update(runs=_transfers_until(
        net, stop, cfg.transfer_bytes)), daemon=True)
    worker.start()
    flaps, half = 0, 0.5 / cfg.flap_hz
    end = time.monotonic() + cfg.flap_s
    down = False
    try:
        while time.monotonic() < end:
            net.link_down(t0, spine)
            down = True
            time.sleep(half)
            net.link_up(t0, spine)
            down = False
            time.sleep(half)
            flaps += 1
    finally:
        if down:
            net.link_up(t0, spine)
        stop.set()
        worker.join(300)
    return {"link": [t0, spine], "flaps": flaps, "transfers": out.get("runs", [])}


def phase_kill_switch(net: MrcNetwork, cfg: SoakConfig) -> dict[str, Any]:
    spine = net.fabric.t1(PLANE, 0).name
    handle = net.start_transfer(SRC, DST, cfg.transfer_bytes, timeout=120)
    time.sleep(0.5)
    pid = net.switch_pid(spine)
    net.kill_switch(spine)  # SIGKILL on BMv2; a software switch dies alone, not its process
    down = net.switch_down(spine)
    reboot_s = net.reboot_switch(spine)
    return {"switch": spine, "killed_pid": pid, "restarted_pid": net.switch_pid(spine),
            "down_after_kill": down, "down_after_reboot": net.switch_down(spine),
            "reboot_s": reboot_s,
            "transfers": [handle.wait()]}


def phase_kill_agent(net: MrcNetwork, cfg: SoakConfig) -> dict[str, Any]:
    agent = net.agents[DST]
    handle = net.start_transfer(SRC, DST, cfg.transfer_bytes, timeout=KILLED_WRITE_TIMEOUT_S)
    time.sleep(0.5)
    assert agent.proc is not None
    pid = agent.proc.pid
    os.kill(pid, signal.SIGKILL)
    agent.proc.wait()
    killed_at = time.monotonic()
    agent.start()  # a fresh agent: new keys, new QPNs and PSNs
    net.record_pids()
    net.reconnect_agent(DST)
    try:
        handle.wait()
        interrupted = {"ended_s": time.monotonic() - killed_at, "error": "none: it completed"}
    except AgentError as exc:  # its receiver died: an error is the expected end
        interrupted = {"ended_s": time.monotonic() - killed_at, "error": str(exc)}
    transfers = [net.transfer(SRC, DST, cfg.transfer_bytes, timeout=120),
                 net.transfer(DST, SRC, cfg.transfer_bytes, timeout=120)]
    return {"agent": f"h{DST}", "killed_pid": pid, "interrupted": interrupted,
            "sender_resyncs": net.stats(SRC)["endpoint"]["resyncs"],
            "restarted_resyncs": net.stats(DST)["endpoint"]["resyncs"], "transfers": transfers}


def run(cfg: SoakConfig) -> dict[str, Any]:
    started = time.monotonic()
    with MrcNetwork(NetworkConfig(target=cfg.target)) as net:
        net.start()
        phases = {"mutated": phase_mutated(net, cfg), "flap": phase_flap(net, cfg),
                  "kill-switch": phase_kill_switch(net, cfg),
                  "kill-agent": phase_kill_agent(net, cfg)}
        owned = json.loads(manifest_path().read_text())  # what the run recorded, checked below
    leftovers = {"processes": [p for p, started in owned["pids"] if same_process(p, started)],
                 "interfaces": [n for n in owned["interfaces"]
                                if os.path.exists(f"/sys/class/net/{n}")],
                 "manifest": manifest_path().exists()}
    transfers = [t for p in phases.values() for t in p["transfers"]]
    frames = phases["mutated"]["frames"]
    summary = {
        "inputs_tried": sum(f.get("sent", 0) for f in frames.values()),
        "injector_errors": [name for name, f in frames.items() if "error" in f],
        "faults_injected": phases["flap"]["flaps"] * 2 + 2,
        "transfers": len(transfers),
        "transfers_verified": sum(1 for t in transfers if t.get("verified")),
        "crashed": [name for name in ("agent", "switch")
                    if not phases["mutated"][f"{name}_alive"]],
        "switch_rss_kib": phases["mutated"]["switch_rss_kib"],
        "leftovers": len(leftovers["processes"]) + len(leftovers["interfaces"])
        + int(leftovers["manifest"]),
        "wall_s": time.monotonic() - started,
    }
    summary["interrupted_write_ended_s"] = phases["kill-agent"]["interrupted"]["ended_s"]
    summary["ok"] = (summary["transfers"] > 0 and not summary["crashed"]
                     and not summary["injector_errors"]
                     and not summary["leftovers"]
                     and summary["transfers_verified"] == summary["transfers"]
                     and summary["interrupted_write_ended_s"] < KILLED_WRITE_TIMEOUT_S / 2)
    return {"summary": summary, "phases": phases, "leftovers": leftovers}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.costs.soak",
                                description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=SoakConfig.frames, help="per injection point")
    p.add_argument("--flap-hz", type=float, default=SoakConfig.flap_hz,
                   help="link flaps per second during the soak (default %(default)g)")
    p.add_argument("--flap-s", type=float, default=SoakConfig.flap_s,
                   help="seconds the link keeps flapping (default %(default)g)")
    add_target_arg(p)
    p.add_argument("--quick", action="store_true", help="20,000 frames, 5 s of flapping")
    add_json_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if os.geteuid() != 0:
        print("bench.costs.soak: needs root (Mininet): sudo .venv/bin/python -m bench.costs.soak",
              file=sys.stderr)
        return 2
    cfg = SoakConfig(frames=20_000 if args.quick else args.frames,
                     flap_hz=args.flap_hz, flap_s=5.0 if args.quick else args.flap_s,
                     transfer_bytes=1024 * 1024 if args.quick else SoakConfig.transfer_bytes,
                     target=args.target)
    for name, value in (("--frames", cfg.frames), ("--flap-hz", cfg.flap_hz),
                        ("--flap-s", cfg.flap_s)):
        if value <= 0:
            print(f"bench.costs.soak: {name} must be positive, got {value}", file=sys.stderr)
            return 2
    result = run(cfg)
    if not json_to_stdout(args):
        print(json.dumps(result["summary"], default=str))
    write_json(args.json, result, default=str)
    return 0 if result["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
