"""Ring all-reduce of a fixed buffer across all hosts, repeated like a synchronous training job.

One step is a ring all-reduce: 2(N-1) phases (reduce-scatter, then all-gather); in each phase
every host writes buffer/N bytes to its ring successor at the same time, and the phase ends
when every write has been acknowledged - the next phase needs the data. The reduction
arithmetic itself is not modelled (it costs the same for every transport); the bytes moved
and the synchronisation are. Step time = the sum of its phase times, measured from the
first write request of a phase to the last answer. Every write is verified byte for byte at
its receiver after its phase (outside the timed part). One link fails at the start of
step `fail_step` and stays down for the rest of the run.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from bench import metrics
from bench.contenders.mrc_flows import FlowSpec
from bench.errors import BenchmarkError
from bench.runner import Injector, set_mode
from emulation.network import MrcNetwork
from host_agent.control import ControlClient, ControlError

_seeds = itertools.count(5_000_000, 100_000)


class AllreduceError(BenchmarkError, RuntimeError):
    """A phase failed (write refused or timed out, or data did not verify)."""


def run_allreduce(net: MrcNetwork, buffer_bytes: int, steps: int, *, contender: str,
                  fail_step: int | None, timeout: float, tick=None) -> dict[str, Any]:
    n = net.fabric.hosts
    ring = [FlowSpec(h, (h + 1) % n, 1) for h in range(n)]
    set_mode(net, ring, contender)
    chunk = -(-buffer_bytes // n)
    regions = {h: net.agent(h).call("register", size=chunk) for h in range(n)}
    injector = Injector(net, 1, 2, 0.0, "link") if fail_step is not None else None
    if injector is not None:
        injector.arm()
    pipes = {h: ControlClient(str(net.agent(h).socket_path), timeout + 30) for h in range(n)}
    base = next(_seeds)
    step_times: list[float] = []
    errors: list[str] = []
    try:
        for step in range(steps):
            if injector is not None and step == fail_step:
                injector.fire()
            total = 0.0
            for phase in range(2 * (n - 1)):
                seed = base + (step * 2 * n + phase) * n
                began = time.monotonic()
                for h in range(n):
                    dst = (h + 1) % n
                    pipes[h].submit("write", peer=dst, bytes=chunk, va=regions[dst]["va"],
                                    rkey=regions[dst]["rkey"], seed=seed + h, timeout=timeout)
                answers = [pipes[h].next_reply()[1] for h in range(n)]
                total += time.monotonic() - began
                errors += [f"step {step} phase {phase} h{h}: {a.get('error')}"
                           for h, a in enumerate(answers) if not a.get("ok")]
                for h in range(n):
                    dst = (h + 1) % n
                    check = net.agent(dst).call("verify", rkey=regions[dst]["rkey"],
                                                length=chunk, seed=seed + h)
                    if not check["match"]:
                        errors.append(f"step {step} phase {phase}: h{dst} data mismatch at "
                                      f"byte {check['first_mismatch']}")
                if errors:
                    raise AllreduceError("; ".join(errors[:3]))
            step_times.append(total)
            if tick is not None:
                tick()
    except (AllreduceError, ControlError) as exc:
        errors.append(str(exc))
    finally:
        for pipe in pipes.values():
            pipe.close()
        info = injector.finish() if injector is not None else None
        for h, r in regions.items():
            net.agent(h).call("deregister", rkey=r["rkey"])
    out: dict[str, Any] = {"ok": not errors and len(step_times) == steps, "steps": steps,
                           "completed_steps": len(step_times), "buffer_bytes": buffer_bytes,
                           "chunk_bytes": chunk, "step_times_s": step_times,
                           "error": "; ".join(errors[:3]) or None, "fail_step": fail_step}
    if step_times:
        out["step_time_s"] = metrics.distribution(step_times)
        clean = [t for i, t in enumerate(step_times) if fail_step is None or i < fail_step]
        if clean:
            out["clean_step_p50_s"] = metrics.percentile(clean, 50)
    if info is not None:
        out["failure"] = info
    return out
