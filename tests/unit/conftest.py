"""Fixtures the unit tests share (a module may not import another test module)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A world-writable sticky directory, as /tmp is: where another user can plant names."""
    path = Path(tempfile.mkdtemp(prefix="mrc-test-shared-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path)
