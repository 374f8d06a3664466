"""The one seam between one machine and several (emulation.builder): both builders offer the
same calls, and nothing outside emulation/cluster/ asks which one a run has."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from emulation.builder import Builder, OneMachine
from emulation.cluster.clusternet import ClusterRun, builder_type
from emulation.netconfig import NetworkConfig, NetworkError

ROOT = Path(__file__).resolve().parents[3]
MEMBERS = [name for name in vars(Builder) if not name.startswith("_")]
# What only several servers have: asking for one of these is asking which builder it is.
CLUSTER_NAMES = {"isRemote", "remote_pid", "cluster_run", "ClusterRun", "RemoteProcess",
                 "RemoteLauncher"}


@pytest.mark.parametrize("cls", [OneMachine, ClusterRun])
def test_each_builder_offers_every_call_with_the_same_parameters(cls) -> None:
    assert "build" in MEMBERS and "cut" in MEMBERS and "close" in MEMBERS
    for name in MEMBERS:
        assert hasattr(cls, name), f"{cls.__name__} lacks {name}"
        if callable(getattr(Builder, name)):
            want = list(inspect.signature(getattr(Builder, name)).parameters)
            got = list(inspect.signature(getattr(cls, name)).parameters)
            assert [p.lstrip("_") for p in got] == want, (cls.__name__, name, got)


def test_the_config_picks_the_builder() -> None:
    assert builder_type(NetworkConfig()) is OneMachine
    assert OneMachine.replace_ports and not ClusterRun.replace_ports


def test_one_machine_has_no_cable_to_cut() -> None:
    one = OneMachine(NetworkConfig(), Path("/nonexistent"), None)
    assert not one.is_cut("p0l0", "p0s0") and one.is_here("h0")
    assert one.summary() == {} and one.close() == {} and one.agent_options(object()) == {}
    with pytest.raises(NetworkError, match="take the link down instead"):
        one.cut("p0l0", "p0s0", on=True)


def _cluster_questions(path: Path, shown: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        name = node.attr if isinstance(node, ast.Attribute) else \
            node.id if isinstance(node, ast.Name) else None
        if name in CLUSTER_NAMES:
            found.append(f"{shown}:{node.lineno}: {name}")
        if isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Attribute) and side.attr == "cluster"
                for side in (node.left, *node.comparators)):
            found.append(f"{shown}:{node.lineno}: .cluster compared")
    return found


def test_nothing_outside_the_cluster_package_asks_which_builder_it_has() -> None:
    """0 cluster branches outside emulation/cluster/ (production code; tests may look)."""
    found = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if {".venv", "tests", ".git", "build"} & set(rel.parts) \
                or rel.parts[:2] == ("emulation", "cluster"):
            continue
        found += _cluster_questions(path, str(rel))
    assert found == []


def test_the_check_sees_a_branch(tmp_path: Path) -> None:
    """The scan above bites: a branch on the config's cluster or a node's isRemote is found."""
    src = tmp_path / "branchy.py"
    src.write_text("if config.cluster is None:\n    pass\nif node.isRemote:\n    pass\n")
    assert len(_cluster_questions(src, src.name)) == 2
