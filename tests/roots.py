"""A root directory for a backend under test: backends refuse a missing root (issue 54)."""

from __future__ import annotations

from pathlib import Path


def made(path: Path) -> Path:
    """``path``, made (with its parents) if missing: what a backend used to do itself."""
    path.mkdir(parents=True, exist_ok=True)
    return path
