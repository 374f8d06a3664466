"""Keeps everyone but the run's own root processes off the switches' control ports.

simple_switch_grpc binds its Thrift runtime port to 0.0.0.0 (BMv2 1.15.1 has no option to
bind it elsewhere) and Thrift has no authentication: anyone who reaches it rewrites tables,
registers and queue rates. A run therefore installs one nftables table of its own
(`inet mrc_shield_<tag>`) before any switch starts, and deletes it when the fabric stops:
- input: a control port (Thrift/runtime, P4Runtime) is dropped unless it arrives on loopback,
  so no other host reaches it;
- output: a connection to a control port over loopback is dropped unless the socket belongs
  to root (uid 0 of the network namespace's user namespace), so no other local user reaches
  it either. P4Runtime additionally wants the run's client certificate (p4rt.tls) and the
  software switch's runtime port the run's token, so neither depends on the shield alone.
The table's name goes into the run manifest, so a killed run's table is removed by the next.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess

TABLE_PREFIX = "mrc_shield_"
_NAME = re.compile(r"^mrc_shield_[0-9a-f]{8}$")
PRIORITY = -10  # before the filter hook's usual rules


class ShieldError(RuntimeError):
    """nftables is missing or refused the table: the message says why."""


def nft_run(args: list[str], script: str | None = None) -> subprocess.CompletedProcess:
    """nft with `args` (and `script` on stdin), never raising for its exit status."""
    return subprocess.run(["nft", *args], input=script, capture_output=True, text=True,
                          timeout=30, check=False)


def ruleset(name: str, ports: list[int]) -> str:
    """The nft script of one run's shield (what `install` loads)."""
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a shield table name ({TABLE_PREFIX} + 8 hex digits)")
    if not ports or not all(1 <= p <= 65535 for p in ports):
        raise ValueError(f"shield ports must be 1..65535, got {ports}")
    ports_set = ", ".join(str(p) for p in sorted(set(ports)))
    return (f"table inet {name} {{\n"
            f"  chain input {{ type filter hook input priority {PRIORITY}; policy accept;\n"
            f"    iifname != \"lo\" tcp dport {{ {ports_set} }} counter drop\n  }}\n"
            f"  chain output {{ type filter hook output priority {PRIORITY}; policy accept;\n"
            f"    oifname \"lo\" tcp dport {{ {ports_set} }} meta skuid != 0 counter drop\n"
            f"  }}\n}}\n")


def install(ports: list[int]) -> str:
    """Load a new shield over `ports`; returns its table name (for `remove`, the manifest)."""
    if shutil.which("nft") is None:
        raise ShieldError("nft (Debian package nftables) is not installed: without it BMv2's "
                          "Thrift port would be open to every host; install it "
                          "(sudo ./testbed setup does)")
    name = f"{TABLE_PREFIX}{secrets.token_hex(4)}"
    done = nft_run(["-f", "-"], ruleset(name, ports))
    if done.returncode != 0:
        raise ShieldError(f"nft refused the control-port shield: {done.stderr.strip()[:300]}")
    return name


def remove(name: str) -> bool:
    """Delete the shield table `name` if it exists (only names this module makes)."""
    if not _NAME.match(name) or shutil.which("nft") is None:
        return False
    return nft_run(["delete", "table", "inet", name]).returncode == 0


def dropped(name: str) -> int:
    """Packets the shield `name` has dropped so far (its counters), for tests and reports."""
    listed = nft_run(["list", "table", "inet", name])
    return sum(int(n) for n in re.findall(r"counter packets (\d+)", listed.stdout))
