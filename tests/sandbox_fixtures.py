"""Fixtures shared by the bwrap sandbox test modules (import them into a module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from filegate.backends.bwrap import BwrapSandboxBackend


@pytest.fixture(scope="module")
def _bwrap_ok(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Probe once per module (raises with the reason if bwrap cannot sandbox here)."""
    BwrapSandboxBackend(tmp_path_factory.mktemp("probe"), check=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return path


@pytest.fixture
def sb(_bwrap_ok: None, root: Path) -> BwrapSandboxBackend:
    return BwrapSandboxBackend(root, check=False)
