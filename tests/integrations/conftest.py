"""Fixtures of the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace root, ``<tmp>/ws``."""
    root = tmp_path / "ws"
    root.mkdir()
    return root
