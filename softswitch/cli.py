"""Runtime control of a running softswitch, the counterpart of BMv2's simple_switch_CLI.

    python -m softswitch.cli --port 9091 set_queue_rate 1000 [EGRESS_PORT [PRIORITY]]
    python -m softswitch.cli --port 9091 set_queue_depth 64 [EGRESS_PORT [PRIORITY]]
    python -m softswitch.cli --port 9091 queues | stats
    python -m softswitch.cli --port 9091 detach   # the switch crashes (its process lives on)
    python -m softswitch.cli --port 9091 attach   # ... and reboots with empty tables

The switch listens on 127.0.0.1:--thrift-port; one JSON object per line each way,
e.g. {"cmd": "set_queue_rate", "rate": 1000, "port": 3} -> {"ok": true}. A switch started
with --control-token-file wants --token-file here: then the two prove the token to each other
without sending it (softswitch.control_auth).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path
from typing import BinaryIO

from p4rt.tls import TlsError, read_private
from softswitch import control_auth as auth
from softswitch.errors import SoftSwitchError

TIMEOUT_S = 5.0
MAX_REPLY = 16 << 20  # a switch's largest reply (queues of 510 ports) is far smaller


class ControlError(SoftSwitchError, RuntimeError):
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
    """Send one request and return the reply, raising ControlError when ok is false.

    With the run's `token` the switch must prove it holds the token before the request is
    sent, and the request and reply are authenticated (softswitch.control_auth): the token
    never goes on the wire, so a listener that took the port learns nothing and is not
    believed. Without a token, the request is sent as it is (a switch started without
    --control-token-file)."""
    where = f"softswitch control port {port}"
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as s, \
                s.makefile("rb") as lines:
            if token is None:
                s.sendall(_line(req))
                reply = _read(lines, where)
            else:
                reply = _authenticated(s, lines, where, req, token)
    except OSError as err:
        raise ControlError(f"{where}: {err}") from err
    if not reply.get("ok"):
        raise ControlError(f"softswitch refused {req}: {reply.get('error')}")
    return reply


def _line(obj: dict) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _read(lines: BinaryIO, where: str) -> dict:
    """One JSON object from the switch (at most MAX_REPLY bytes)."""
    return _decode(lines.readline(MAX_REPLY), where)


def _decode(data: bytes, where: str) -> dict:
    try:
        reply = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ControlError(f"{where}: bad reply {data[:80]!r}") from err
    if not isinstance(reply, dict):
        raise ControlError(f"{where}: bad reply {data[:80]!r}")
    return reply


def _authenticated(s: socket.socket, lines: BinaryIO, where: str, req: dict,
                   token: str) -> dict:
    """The challenge-response exchange of softswitch.control_auth; the reply it proves."""
    client_nonce = auth.new_nonce()
    s.sendall(_line({"hello": client_nonce.hex()}))
    challenge = _read(lines, where)
    try:
        server_nonce = auth.parse_nonce(challenge.get("nonce"))
        auth.check(token, auth.SERVER, client_nonce, server_nonce, b"", challenge.get("proof"))
    except auth.AuthError:
        said = f" (it said: {str(challenge.get('error'))[:200]})" if "error" in challenge else ""
        raise ControlError(f"{where}: the listener did not prove the run's control token, so "
                           "it is not the run's switch (or this token is not the run's); "
                           f"the request was not sent{said}") from None
    body = json.dumps(req).encode()
    s.sendall(_line({"body": body.decode(),
                     "mac": auth.tag(token, auth.REQUEST, client_nonce, server_nonce, body)}))
    answer = _read(lines, where)
    if "body" not in answer:  # the switch refused our request before executing it
        return {"ok": False, "error": answer.get("error", f"unauthenticated reply {answer}")}
    reply_body = str(answer["body"]).encode()
    try:
        auth.check(token, auth.REPLY, client_nonce, server_nonce, reply_body, answer.get("mac"))
    except auth.AuthError:
        raise ControlError(f"{where}: the reply's authentication is wrong; not believed") \
            from None
    return _decode(reply_body, where)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m softswitch.cli", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True, help="the switch's --thrift-port")
    p.add_argument("--token-file", type=Path,
                   help="the run's control token (a testbed fabric's: /run/mrc-testbed/"
                        "control.token)")
    p.add_argument("command", nargs="+",
                   help="the runtime command and its arguments (module docstring)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
