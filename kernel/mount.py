"""Where Filegate's virtual ``/`` appears in a framework's paths (a mount point).

A framework adapter names files in its own path space. The bubblewrap sandbox
runs commands with the workspace at ``/workspace``, so an adapter over it must
name the files the same way in file operations: under ``mount="/workspace"``,
``/workspace/a.py`` is Filegate's ``/a.py``. The Deep Agents and the Pydantic
AI adapters both map paths through :class:`Mount`, so one rule decides what is
inside (pure: the kernel's path validation only).
"""

from __future__ import annotations

from dataclasses import dataclass

from filegate.kernel.paths import validate_path


@dataclass(frozen=True)
class Mount:
    """Where Filegate's virtual ``/`` appears in an adapter's paths.

    Paths outside the mount, and relative ones, are refused (``ValueError``):
    an adapter reports them as its framework's ``invalid_path`` or error.
    """

    at: str = "/"

    def inward(self, path: str) -> str:
        """The adapter's path -> Filegate's virtual path (raises ValueError)."""
        # Reasons do not repeat the path: every caller's message names it already.
        if not path.startswith("/"):
            raise ValueError("path must be absolute")
        virtual = str(validate_path(path))
        if self.at == "/":
            return virtual
        if virtual == self.at:
            return "/"
        if not virtual.startswith(self.at + "/"):
            raise ValueError(f"outside the mount {self.at}")
        return virtual[len(self.at) :]

    def outward(self, virtual: str) -> str:
        """Filegate's virtual path -> the adapter's path."""
        if self.at == "/":
            return virtual
        return self.at if virtual == "/" else self.at + virtual


__all__ = ["Mount"]
