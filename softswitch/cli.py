"""Runtime control of a running softswitch, the counterpart of BMv2's simple_switch_CLI.

    python -m softswitch.cli --port 9091 set_queue_rate 1000 [EGRESS_PORT [PRIORITY]]
    python -m softswitch.cli --port 9091 set_queue_depth 64 [EGRESS_PORT [PRIORITY]]
    python -m softswitch.cli --port 9091 queues | stats
    python -m softswitch.cli --port 9091 detach   # the switch crashes (its process lives on)
    python -m softswitch.cli --port 9091 attach   # ... and reboots with empty tables

The switch listens on 127.0.0.1:--thrift-port; one JSON object per line each way,
e.g. {"cmd": "set_queue_rate", "rate": 1000, "port": 3} -> {"ok": true}.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from p4rt.tls import TlsError, read_private

TIMEOUT_S = 5.0


class ControlError(RuntimeError):
    """The switch refused a command, or could not be reached."""


def parse_command(words: list[str]) -> dict:
    """BMv2 CLI syntax -> JSON request; raises ValueError saying the expected form."""
    if not words:
        raise ValueError("no command (set_queue_rate, set_queue_depth, set_link_delay, queues, "
                         "stats, detach, attach)")
    cmd, args = words[0], words[1:]
    if cmd == "set_link_delay" and args:
        try:
            return {"cmd": cmd, "delay": float(args[0]), "host_ports": [int(a) for a in args[1:]]}
        except ValueError:
            raise ValueError(f"usage: set_link_delay <seconds> [<host-facing port> ...] with "
                             f"numbers, got {' '.join(args)!r}") from None
    if cmd in ("queues", "stats", "detach", "attach") and not args:
        return {"cmd": cmd}
    if cmd in ("set_queue_rate", "set_queue_depth") and 1 <= len(args) <= 3:
        key = "rate" if cmd == "set_queue_rate" else "depth"
        try:
            req: dict = {"cmd": cmd, key: float(args[0]) if key == "rate" else int(args[0])}
            if len(args) > 1:
                req["port"] = int(args[1])
            if len(args) > 2:
                req["priority"] = int(args[2])
        except ValueError:
            raise ValueError(f"usage: {cmd} <{key}> [<egress_port> [<priority>]] "
                             f"with numbers, got {' '.join(args)!r}") from None
        return req
    raise ValueError(f"cannot parse {' '.join(words)!r}: use set_queue_rate <pps> "
                     "[port [prio]], set_queue_depth <packets> [port [prio]], set_link_delay "
                     "<seconds> [host ports], queues, stats, detach, attach")


def request(port: int, req: dict, host: str = "127.0.0.1", token: str | None = None) -> dict:
    """Send one request (with the run's control token, if the switch wants one); returns the
    reply, raising ControlError when ok is false."""
    if token is not None:
        req = {**req, "token": token}
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as s:
            s.sendall(json.dumps(req).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as err:
        raise ControlError(f"softswitch control port {port}: {err}") from err
    try:
        reply = json.loads(data)
    except json.JSONDecodeError as err:
        raise ControlError(f"softswitch control port {port}: bad reply {data[:80]!r}") from err
    if not reply.get("ok"):
        shown = {k: v for k, v in req.items() if k != "token"}
        raise ControlError(f"softswitch refused {shown}: {reply.get('error')}")
    return reply


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m softswitch.cli", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True, help="the switch's --thrift-port")
    p.add_argument("--token-file", type=Path,
                   help="the run's control token (a testbed fabric's: /run/mrc-testbed/"
                        "control.token)")
    p.add_argument("command", nargs="+")
    args = p.parse_args(argv)
    try:
        token = read_private(args.token_file).decode().strip() if args.token_file else None
        reply = request(args.port, parse_command(args.command), token=token)
    except (ValueError, ControlError, TlsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(reply, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
