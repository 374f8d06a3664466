"""controller.p4build: the BMv2 JSON is compiled on demand, when missing or older than p4src/."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from controller import p4build
from tests.support import require_bmv2


def _touch(path: Path, when: float) -> None:
    path.write_text("x")
    os.utime(path, (when, when))


def test_staleness_follows_the_newest_source(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "mrc.p4"
    monkeypatch.setattr(p4build, "sources", lambda: [src])
    out = tmp_path / "build"
    out.mkdir()
    now = time.time()
    _touch(src, now - 100)
    assert p4build.is_stale(out)  # nothing built yet
    json_path, p4info = p4build.outputs(out)
    _touch(json_path, now - 50)
    assert p4build.is_stale(out)  # half built
    _touch(p4info, now - 50)
    assert not p4build.is_stale(out)
    _touch(src, now)
    assert p4build.is_stale(out)  # the source changed after the build


def test_missing_compiler_says_how_to_install(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(p4build.CompileError, match="install-p4lang.sh"):
        p4build.compile_program(tmp_path / "build")


@pytest.mark.bmv2
def test_ensure_compiled_builds_once(tmp_path: Path) -> None:
    require_bmv2(("p4c-bm2-ss",))
    out = tmp_path / "build"
    json_path, p4info = p4build.ensure_compiled(out)
    assert json_path.stat().st_size > 0 and p4info.stat().st_size > 0
    stamp = json_path.stat().st_mtime_ns
    logged: list[str] = []
    p4build.ensure_compiled(out, log=logged.append)
    assert logged == [] and json_path.stat().st_mtime_ns == stamp  # up to date: not rebuilt
