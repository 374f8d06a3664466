"""emulation.cluster.cluster: --servers and --cluster, refused with what to fix."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from emulation.cluster.cluster import (
    VXLAN_OVERHEAD,
    Cluster,
    ClusterError,
    Server,
    add_cluster_args,
    cluster_from_args,
    from_file,
)
from wire.layout import FULL_DATA_FRAME_LEN

GOOD = {"user": "root", "underlay_mtu": 1500,
        "servers": [{"name": "srv0", "address": "10.251.0.1"},
                    {"name": "srv1", "address": "10.251.0.2"}]}


def good(**changes: object) -> str:
    data = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if key.startswith("srv1_"):
            data["servers"][1][key[5:]] = value
        else:
            data[key] = value
    return json.dumps(data)


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_cluster_args(p)
    return p.parse_args(argv)


def write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "cluster.json"
    f.write_text(text)
    return f


def test_a_cluster_file_names_servers_addresses_and_user(tmp_path: Path) -> None:
    c = cluster_from_args(parse("--cluster", str(write(tmp_path, good()))))
    assert c is not None and c.names == ["srv0", "srv1"]
    assert [s.address for s in c.servers] == ["10.251.0.1", "10.251.0.2"]
    assert c.user == "root" and c.tunnel_mtu == 1500 - VXLAN_OVERHEAD


def test_no_option_is_one_machine() -> None:
    assert cluster_from_args(parse()) is None


def test_servers_by_address_need_no_lookup() -> None:
    c = cluster_from_args(parse("--servers", "10.1.0.1,10.1.0.2"))
    assert c is not None and [s.address for s in c.servers] == ["10.1.0.1", "10.1.0.2"]


def test_both_options_at_once_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        parse("--servers", "a", "--cluster", str(write(tmp_path, good())))


@pytest.mark.parametrize("text, message", [
    ("{}", 'no "servers" list'),
    ("[]", "top level must be an object"),
    (good(colour=1), "unknown keys \\['colour'\\]"),
    (good(srv1_address="10.251.0.1"), "given twice"),
    (good(srv1_address="fe80::1"), "IPv6"),
    (good(srv1_address="127.0.0.1"), "cannot end a tunnel"),
    (good(srv1_address="ten"), "not an IP address"),
    (good(srv1_address=5), "address must be a string"),
    (good(underlay_mtu=1150), "needs an MTU of at least"),
    (good(underlay_mtu="big"), "must be a int"),
    (good(underlay_mtu=True), "must be a int"),
    (good(srv1_port=22), "unknown keys \\['port'\\]"),
    ('{"servers": [{"address": "10.0.0.1"}]}', 'needs a "name"'),
    ("{servers", "not JSON"),
])
def test_bad_cluster_files_are_refused_with_the_fix(tmp_path: Path, text: str,
                                                    message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        from_file(write(tmp_path, text))


def test_missing_file_and_ssh_config_are_named(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="cannot read cluster file"):
        from_file(tmp_path / "absent.toml")
    with pytest.raises(ClusterError, match="ssh_config .* does not exist"):
        from_file(write(tmp_path, good(ssh_config="nope")))
    (tmp_path / "ssh_config").write_text("Host *\n")
    assert from_file(write(tmp_path, good(ssh_config="ssh_config"))).ssh_config == \
        (tmp_path / "ssh_config").resolve()


def test_the_smallest_mtu_that_carries_a_full_frame_is_accepted() -> None:
    need = FULL_DATA_FRAME_LEN - 14 + VXLAN_OVERHEAD
    servers = (Server("a", "10.0.0.1"),)
    assert Cluster(servers, underlay_mtu=need).tunnel_mtu == FULL_DATA_FRAME_LEN - 14
    with pytest.raises(ClusterError, match=str(need)):
        Cluster(servers, underlay_mtu=need - 1)


def test_an_unresolvable_name_says_how_to_give_its_address() -> None:
    with pytest.raises(ClusterError, match="give it in a cluster file"):
        cluster_from_args(parse("--servers", "no-such-server.invalid"))


def test_a_server_is_found_by_name_and_localhost_is_the_first() -> None:
    c = Cluster((Server("srv0", "10.0.0.1"), Server("srv1", "10.0.0.2")))
    assert c.server("srv1").address == "10.0.0.2"
    assert c.server("localhost") is c.servers[0]
    with pytest.raises(ClusterError, match="no server 'srv9' in this cluster"):
        c.server("srv9")
