"""P4Runtime over mutual TLS: the file names of a run's keys, and the channels built on them.

Any local user can connect to a port on 127.0.0.1, and the first client with the highest
election id becomes primary controller. So a testbed fabric's switches (BMv2 and the software
switch alike) serve P4Runtime only with TLS and require a client certificate signed by the
run's own CA (BMv2's --grpc-server-ssl --grpc-server-with-client-auth); the keys live in the
run's private directory, readable by root only (safety.credentials issues them).

Both switch programs take the same flags (SERVER_FLAGS); a client loads ClientTls from the
directory and opens `channel(address, tls)`. Next to the keys the run records where its
switches serve P4Runtime (ADDRESSES, `load_addresses`): a run moves a switch off a default
port another local user holds (safety.runports).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import grpc

from p4rt.errors import P4rtError

CA_CERT = "p4rt-ca.pem"
SERVER_CERT = "p4rt-server.pem"
SERVER_KEY = "p4rt-server.key"
CLIENT_CERT = "p4rt-client.pem"
CLIENT_KEY = "p4rt-client.key"
ADDRESSES = "p4rt-addresses.json"  # switch name -> "127.0.0.1:PORT" of the running fabric
MAX_PEM_BYTES = 64 * 1024


class TlsError(P4rtError, RuntimeError):
    """A key or certificate file that is missing or not safe to use: the message names it."""


def read_private(path: Path) -> bytes:
    """The bytes of a key file that only we can have written: not a link, a regular file of
    ours, closed to group and others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TlsError(f"cannot open {path} without following links: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise TlsError(f"refusing {path}: not a regular file of uid {os.geteuid()} with "
                           f"mode 600 (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o})")
        data = f.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise TlsError(f"refusing {path}: over {MAX_PEM_BYTES} bytes")
    return data


@dataclass(frozen=True)
class ClientTls:
    """What a controller presents and trusts: the run's CA, its client certificate and key."""
    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def load(cls, directory: Path) -> ClientTls:
        return cls(*(read_private(directory / name) for name in (CA_CERT, CLIENT_CERT,
                                                                 CLIENT_KEY)))

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)


def channel(address: str, tls: ClientTls | None) -> grpc.Channel:
    """A channel to a switch's P4Runtime server; plaintext only for a switch started without
    TLS (a bare `python -m softswitch` or simple_switch_grpc of one's own)."""
    if tls is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, tls.credentials())


def server_flags(directory: Path) -> list[str]:
    """simple_switch_grpc's TLS flags (after its `--`), which the software switch takes too."""
    return ["--grpc-server-ssl", "--grpc-server-cacert", str(directory / CA_CERT),
            "--grpc-server-cert", str(directory / SERVER_CERT),
            "--grpc-server-key", str(directory / SERVER_KEY), "--grpc-server-with-client-auth"]


def server_credentials(ca: Path, cert: Path, key: Path,
                       client_auth: bool) -> grpc.ServerCredentials:
    """For a gRPC server given BMv2's flags (the software switch)."""
    return grpc.ssl_server_credentials([(read_private(key), read_private(cert))],
                                       root_certificates=read_private(ca),
                                       require_client_auth=client_auth)


def addresses_file(addresses: dict[str, str]) -> bytes:
    """The ADDRESSES file's content for switch name -> P4Runtime address."""
    return json.dumps(addresses, sort_keys=True).encode()


def load_addresses(directory: Path) -> dict[str, str]:
    """Switch name -> P4Runtime address as the run recorded them next to its keys, or {}
    when `directory` has no such record (keys of one's own)."""
    path = directory / ADDRESSES
    if not os.path.lexists(path):
        return {}
    try:
        data = json.loads(read_private(path))
    except ValueError as exc:
        raise TlsError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise TlsError(f"{path} is not an object of switch name -> address")
    return data
