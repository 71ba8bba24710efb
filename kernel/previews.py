"""What a gated call would change, as a reviewer sees it before deciding.

The workflow never reads the workspace, so the preview is computed on the
route's tools worker by a read-only activity and stored with the pending
approval. ``fingerprint`` identifies the state the preview was computed
against: when the decision arrives, the workflow asks again and compares, so a
file that changed meanwhile is reported to the reviewer and the call is
validated again instead of being applied to content nobody looked at.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

PreviewKind = Literal["new_file", "overwrite", "edit", "delete", "execute", "unavailable"]
"""``new_file``/``overwrite``: a ``write_file`` onto a missing or existing file;
``edit``: an ``edit_file`` diff with real line numbers; ``delete``: the files
that go; ``execute``: command and working directory; ``unavailable``: the
preview could not be computed (``error`` says why; the reviewer still decides)."""


class ChangePreview(BaseModel):
    """The change one pending call would make, computed where the files are."""

    kind: PreviewKind
    path: str | None = None
    """The virtual path the call names (None for ``execute``)."""
    diff: str | None = None
    """Unified diff (``---``/``+++`` headers, ``@@ -a,b +c,d @@`` hunks with real
    line numbers, 3 lines of context) for ``new_file``, ``overwrite`` and ``edit``."""
    deleted: list[str] = Field(default_factory=list)
    """``delete``: the virtual paths that go (a directory lists its files)."""
    command: str | None = None
    cwd: str | None = None
    fingerprint: str | None = None
    """Digest of what the preview was computed against (file bytes, or the
    listing for a delete); None when nothing exists there yet."""
    truncated: bool = False
    """The diff or the deleted list was cut to stay small in history."""
    error: str | None = None
    """Why the preview is ``unavailable``, or a problem the call would hit
    (for example ``old_string`` not found): shown on the card."""
