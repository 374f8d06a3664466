"""p4runtime-sh on one switch, by name, as a backup client so the controller stays primary.

Election ids: the controller uses CONTROLLER_ELECTION_ID (0,100); the shell uses (0,1). While
a controller process holds its session (convergence/serve mode), the shell is a backup: it can
read tables and counters but every Write is refused with PERMISSION_DENIED, and p4runtime-sh
says "You are not the primary client". When no controller is connected (the one-shot `install`
command has exited) the shell is the only client and therefore primary: writes work, and the
next controller to connect takes over again because its election id is higher.

The shell never pushes a pipeline (that needs primary and would wipe the entries): it loads the
P4Info the switch runs, and we check first that this is the committed p4src/mrc.p4info.txtpb.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import grpc
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.errors import ControllerError
from fabric.topology import Fabric, TopologyError
from p4rt import tls
from p4rt.p4info import load_committed

SHELL_ELECTION_ID = (0, 1)


class ShellError(ControllerError):
    """The switch cannot be opened; the message says what to do."""


def shell_args(fabric: Fabric, name: str, address: str | None = None,
               election_id: tuple[int, int] = SHELL_ELECTION_ID,
               tls_dir: Path | None = None) -> list[str]:
    """p4runtime-sh command line for switch `name` (no --config: see module docstring); with
    the run's `tls_dir`, over mutual TLS with its client certificate."""
    if name not in fabric.by_name:
        raise TopologyError(f"no switch {name!r} in {fabric}: names are "
                            f"{', '.join(s.name for s in fabric.switches[:4])}, ...")
    switch = fabric.by_name[name]
    args = ["--grpc-addr", address or switch.grpc_address, "--device-id", str(switch.device_id),
            "--election-id", f"{election_id[0]},{election_id[1]}"]
    if tls_dir is not None:
        args += ["--ssl", "--cacert", str(tls_dir / tls.CA_CERT), "--cert",
                 str(tls_dir / tls.CLIENT_CERT), "--key", str(tls_dir / tls.CLIENT_KEY)]
    return args


def check_pipeline(address: str, device_id: int, timeout: float = 3.0,
                   client: tls.ClientTls | None = None) -> str:
    """Raise ShellError when the switch is unreachable or unprogrammed; a warning or ''."""
    channel = tls.channel(address, client)
    try:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE)
        reply = stub.GetForwardingPipelineConfig(req, timeout=timeout)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
            raise ShellError(f"{address} has no pipeline yet: run `python -m controller "
                             "install ...` first") from None
        raise ShellError(f"cannot reach the switch at {address}: {err.code().name} "
                         f"{err.details()}") from None
    finally:
        channel.close()
    if reply.config.p4info != load_committed():
        return ("warning: the switch runs a P4Info that differs from p4src/mrc.p4info.txtpb; "
                "the shell uses the switch's")
    return ""


def without_jedi(start: Callable) -> Callable:
    """Wrap IPython's start_ipython so tab completion works on Python 3.11+ (jedi breaks it)."""
    def start_ipython(*args, config, **kwargs):
        config.IPCompleter.use_jedi = False
        return start(*args, config=config, **kwargs)
    return start_ipython


def run(fabric: Fabric, name: str, address: str | None = None,
        tls_dir: Path | None = None) -> int:
    args = shell_args(fabric, name, address, tls_dir=tls_dir)
    switch = fabric.by_name[name]
    try:
        client = tls.ClientTls.load(tls_dir) if tls_dir else None
        warning = check_pipeline(args[1], switch.device_id, client=client)
    except (ShellError, tls.TlsError) as err:
        print(f"controller shell: {err}", file=sys.stderr)
        return 1
    if warning:
        print(warning, file=sys.stderr)
    from p4runtime_sh import shell as p4sh  # heavy (IPython): only when a shell is opened

    p4sh.start_ipython = without_jedi(p4sh.start_ipython)
    sys.argv = ["p4runtime-sh", *args]
    print(f"p4runtime-sh on {name} ({args[1]}, device {switch.device_id}), election id "
          f"{SHELL_ELECTION_ID}: backup while a controller is connected")
    p4sh.main()
    return 0
