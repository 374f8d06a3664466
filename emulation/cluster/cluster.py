"""Which servers a fabric runs on when one machine is not enough (Mininet Cluster Edition).

Named on the command line, the same on every entry point that builds a fabric:

    --servers srv0,srv1,srv2          ssh names; the first is this machine (controller, report)
    --cluster cluster.json            a file: servers, their underlay addresses, the ssh user

    {"user": "root",                  ssh user on every server (default: root)
     "ssh_config": "ssh_config",      optional: ssh -F this file (relative to the cluster file)
     "underlay_mtu": 1500,            the MTU of the network between the servers
     "servers": [{"name": "srv0",     what ssh connects to
                  "address": "10.251.0.1"},   its underlay IPv4 address: tunnels end here
                 {"name": "srv1", "address": "10.251.0.2"}]}

JSON, not TOML: the project runs on Python 3.10 (Ubuntu 22.04, the lab VM), which has no
tomllib.

Without `address`, a server's address is looked up (getent ahostsv4), as Cluster Edition
does. Links between servers are VXLAN tunnels over the underlay; a tunnel costs
VXLAN_OVERHEAD bytes of the underlay MTU, so a fabric whose largest frame would not fit is
refused here, with the numbers, before anything starts.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulation.errors import EmulationError
from wire.layout import FULL_DATA_FRAME_LEN

ETHERNET_HEADER = 14
# outer IPv4 20 + UDP 8 + VXLAN 8 + the inner Ethernet header 14 (RFC 7348, section 5)
VXLAN_OVERHEAD = 20 + 8 + 8 + ETHERNET_HEADER
DEFAULT_UNDERLAY_MTU = 1500
DEFAULT_USER = "root"
FILE_KEYS = {"user", "ssh_config", "underlay_mtu", "servers"}
SERVER_KEYS = {"name", "address"}


class ClusterError(EmulationError, ValueError):
    """A cluster that cannot be used as given; the message says what to fix."""


@dataclass(frozen=True)
class Server:
    name: str  # what ssh connects to
    address: str  # underlay IPv4 address


@dataclass(frozen=True)
class Cluster:
    """The servers (the first is this machine), the ssh user and the underlay."""
    servers: tuple[Server, ...]
    user: str = DEFAULT_USER
    ssh_config: Path | None = None
    underlay_mtu: int = DEFAULT_UNDERLAY_MTU

    def __post_init__(self) -> None:
        if not self.servers:
            raise ClusterError("a cluster needs at least one server")
        for what, values in (("name", [s.name for s in self.servers]),
                             ("address", [s.address for s in self.servers])):
            dup = {v for v in values if values.count(v) > 1}
            if dup:
                raise ClusterError(f"server {what} {sorted(dup)[0]!r} is given twice")
        if not self.user or any(c.isspace() for c in self.user):
            raise ClusterError(f"ssh user {self.user!r} is not a user name")
        check_frames_fit(self.underlay_mtu)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.servers]

    def server(self, name: str) -> Server:
        """The server called `name`; "localhost" is the first (this machine)."""
        if name == "localhost":
            return self.servers[0]
        for s in self.servers:
            if s.name == name:
                return s
        raise ClusterError(f"no server {name!r} in this cluster ({', '.join(self.names)})")

    @property
    def tunnel_mtu(self) -> int:
        """The IP MTU of a link between servers: the underlay's less the tunnel's headers."""
        return self.underlay_mtu - VXLAN_OVERHEAD


def check_frames_fit(underlay_mtu: int) -> None:
    """Refuse an underlay whose tunnels cannot carry a full MRC data frame."""
    need = FULL_DATA_FRAME_LEN - ETHERNET_HEADER + VXLAN_OVERHEAD
    if underlay_mtu < need:
        raise ClusterError(
            f"underlay MTU {underlay_mtu} is too small: a full MRC data frame is "
            f"{FULL_DATA_FRAME_LEN} bytes ({FULL_DATA_FRAME_LEN - ETHERNET_HEADER} of IP), "
            f"and a VXLAN tunnel adds {VXLAN_OVERHEAD}, so the underlay needs an MTU of at "
            f"least {need}")


def _address(name: str, given: str | None) -> str:
    text = given if given is not None else _lookup(name)
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise ClusterError(f"server {name!r}: address {text!r} is not an IP address") from None
    if addr.version != 4:
        raise ClusterError(f"server {name!r}: address {text} is IPv6; the VXLAN underlay is "
                           "IPv4 (give an IPv4 address)")
    if addr.is_loopback or addr.is_unspecified:
        raise ClusterError(f"server {name!r}: address {text} cannot end a tunnel between "
                           "machines (give the server's underlay address)")
    return str(addr)


def _lookup(name: str) -> str:
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET)
    except socket.gaierror as err:
        raise ClusterError(f"server {name!r}: no IPv4 address found ({err}); give it in a "
                           "cluster file (--cluster) as address = ...") from None
    return str(infos[0][4][0])


def from_names(text: str) -> Cluster:
    """`--servers a,b,c`: ssh names, addresses looked up, the default user and MTU."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise ClusterError(f"--servers {text!r}: give comma-separated server names, e.g. "
                           "srv0,srv1,srv2")
    return Cluster(tuple(Server(n, _address(n, None)) for n in names))


def from_file(path: Path) -> Cluster:
    """A cluster file (module docstring); unknown keys are refused, not ignored."""
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ClusterError(f"cannot read cluster file {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ClusterError(f"cluster file {path} is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ClusterError(f"cluster file {path}: the top level must be an object")
    unknown = set(data) - FILE_KEYS
    if unknown:
        raise ClusterError(f"cluster file {path}: unknown keys {sorted(unknown)} (known: "
                           f"{sorted(FILE_KEYS)})")
    servers = data.get("servers")
    if not isinstance(servers, list) or not servers:
        raise ClusterError(f"cluster file {path}: no \"servers\" list")
    return Cluster(tuple(_server(path, i, s) for i, s in enumerate(servers)),
                   user=_typed(path, data, "user", str, DEFAULT_USER),
                   ssh_config=_ssh_config(path, data),
                   underlay_mtu=_typed(path, data, "underlay_mtu", int, DEFAULT_UNDERLAY_MTU))


def _server(path: Path, i: int, entry: Any) -> Server:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ClusterError(f"cluster file {path}: server {i + 1} needs a \"name\"")
    unknown = set(entry) - SERVER_KEYS
    if unknown:
        raise ClusterError(f"cluster file {path}: server {entry['name']!r} has unknown keys "
                           f"{sorted(unknown)} (known: {sorted(SERVER_KEYS)})")
    address = entry.get("address")
    if address is not None and not isinstance(address, str):
        raise ClusterError(f"cluster file {path}: server {entry['name']!r}: address must be "
                           "a string")
    return Server(entry["name"], _address(entry["name"], address))


def _typed(path: Path, data: dict, key: str, kind: type, default: Any) -> Any:
    value = data.get(key, default)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ClusterError(f"cluster file {path}: {key} must be a {kind.__name__}, got "
                           f"{value!r}")
    return value


def _ssh_config(path: Path, data: dict) -> Path | None:
    value = data.get("ssh_config")
    if value is None:
        return None
    if not isinstance(value, str):
        raise ClusterError(f"cluster file {path}: ssh_config must be a path string")
    config = (path.parent / value).resolve()
    if not config.is_file():
        raise ClusterError(f"cluster file {path}: ssh_config {config} does not exist")
    return config


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    """--servers and --cluster, the same on every entry point that builds a fabric."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--servers", metavar="A,B,...",
                   help="run the fabric over these servers (ssh names; the first is this "
                        "machine): Mininet Cluster Edition, links between servers over VXLAN")
    g.add_argument("--cluster", type=Path, metavar="FILE",
                   help="as --servers, from a cluster file (emulation/cluster/cluster.py)")


def cluster_from_args(args: argparse.Namespace) -> Cluster | None:
    """The cluster the command line names, or None for one machine."""
    if getattr(args, "cluster", None) is not None:
        return from_file(args.cluster)
    if getattr(args, "servers", None):
        return from_names(args.servers)
    return None
