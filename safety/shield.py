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

The run's other guards keep their tables the same way (a prefix, 8 random hex digits, the
manifest): the VXLAN guard (emulation.cluster.vxguard) and the switch-port guard
(safety.portguard). `remove` knows every one of their families (GUARD_FAMILIES), since
the manifest's sweep (safety.runstate) hands it every table the run recorded, a cable cut's
(emulation.cluster.cablecut) too.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
from collections.abc import Callable

from safety.errors import SafetyError

TABLE_PREFIX = "mrc_shield_"
_NAME = re.compile(r"^mrc_shield_[0-9a-f]{8}$")
PRIORITY = -10  # before the filter hook's usual rules
VXLAN_GUARD_PREFIX = "mrc_vxgate_"  # emulation.cluster.vxguard
PORT_GUARD_PREFIX = "mrc_ports_"  # safety.portguard
CABLE_CUT_PREFIX = "mrc_cut_"  # emulation.cluster.cablecut
GUARD_FAMILIES = {TABLE_PREFIX: "inet", VXLAN_GUARD_PREFIX: "inet", PORT_GUARD_PREFIX: "netdev",
                  CABLE_CUT_PREFIX: "inet"}
_GUARD_NAME = re.compile(r"^(mrc_[a-z]+_)[0-9a-f]{8}$")


class ShieldError(SafetyError, RuntimeError):
    """nftables is missing or refused the table: the message says why."""


def nft_run(args: list[str], script: str | None = None) -> subprocess.CompletedProcess:
    """nft with `args` (and `script` on stdin), never raising for its exit status."""
    return subprocess.run(["nft", *args], input=script, capture_output=True, text=True,
                          timeout=30, check=False)


def family(name: str) -> str | None:
    """The nftables family of the run's guard table `name`, or None if no guard makes it."""
    found = _GUARD_NAME.match(name)
    return GUARD_FAMILIES.get(found.group(1)) if found else None


def new_name(prefix: str) -> str:
    """A fresh table name for a guard (GUARD_FAMILIES): random, so runs never share one."""
    if prefix not in GUARD_FAMILIES:
        raise ValueError(f"{prefix!r} is not a guard's table prefix")
    return f"{prefix}{secrets.token_hex(4)}"


def require_nft(what: str) -> None:
    """Refuse to go on without nft: `what` names what would be left unguarded."""
    if shutil.which("nft") is None:
        raise ShieldError(f"nft (Debian package nftables) is not installed: without it {what};"
                          " install it (sudo ./testbed setup does)")


def _rules(ports: list[int]) -> dict[str, str]:
    """Chain -> the one rule a shield keeps in it over `ports` (nft syntax)."""
    if not ports or not all(1 <= p <= 65535 for p in ports):
        raise ValueError(f"shield ports must be 1..65535, got {ports}")
    ports_set = ", ".join(str(p) for p in sorted(set(ports)))
    return {"input": f'iifname != "lo" tcp dport {{ {ports_set} }} counter drop',
            "output": f'oifname "lo" tcp dport {{ {ports_set} }} meta skuid != 0 counter drop'}


def ruleset(name: str, ports: list[int]) -> str:
    """The nft script of one run's shield (what `install` loads)."""
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a shield table name ({TABLE_PREFIX} + 8 hex digits)")
    rules = _rules(ports)
    return (f"table inet {name} {{\n"
            f"  chain input {{ type filter hook input priority {PRIORITY}; policy accept;\n"
            f"    {rules['input']}\n  }}\n"
            f"  chain output {{ type filter hook output priority {PRIORITY}; policy accept;\n"
            f"    {rules['output']}\n"
            f"  }}\n}}\n")


def extend(name: str, ports: list[int]) -> None:
    """Cover `ports` too with the run's shield `name` (a switch moved to free ports: the
    rules go in before the switch listens there)."""
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a shield table name ({TABLE_PREFIX} + 8 hex digits)")
    script = "".join(f"add rule inet {name} {chain} {rule}\n"
                     for chain, rule in _rules(ports).items())
    done = nft_run(["-f", "-"], script)
    if done.returncode != 0:
        raise ShieldError(f"nft refused to extend the control-port shield {name}: "
                          f"{done.stderr.strip()[:300]}")


def install(ports: list[int]) -> str:
    """Load a new shield over `ports`; returns its table name (for `remove`, the manifest)."""
    return load(TABLE_PREFIX, lambda name: ruleset(name, ports), "the control-port shield",
                "BMv2's Thrift port would be open to every host")


def load(prefix: str, script: Callable[[str], str], title: str, unguarded: str,
         record: Callable[[str], None] = lambda _name: None) -> str:
    """Load a new guard table (GUARD_FAMILIES' `prefix`, a fresh name) from `script(name)`;
    `record` hears the name before nft loads it (a run manifest), so a run killed meanwhile
    is swept all the same. `title` names the guard and `unguarded` what would be left open,
    in the errors. Returns the name, for `remove`. The one loader of the shield, the VXLAN
    guard and the switch-port guard."""
    require_nft(unguarded)
    name = new_name(prefix)
    text = script(name)
    record(name)
    done = nft_run(["-f", "-"], text)
    if done.returncode != 0:
        raise ShieldError(f"nft refused {title}: {done.stderr.strip()[:300]}")
    return name


def remove(name: str) -> bool:
    """Delete the guard table `name` if it exists (only names the guards make: the shield's,
    the VXLAN guard's, the switch-port guard's)."""
    table_family = family(name)
    if table_family is None or shutil.which("nft") is None:
        return False
    return nft_run(["delete", "table", table_family, name]).returncode == 0


def dropped(name: str) -> int:
    """Packets the guard table `name` has dropped so far (its counters), for tests and
    reports."""
    table_family = family(name)
    if table_family is None:
        return 0
    listed = nft_run(["list", "table", table_family, name])
    return sum(int(n) for n in re.findall(r"counter packets (\d+)", listed.stdout))
