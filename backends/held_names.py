"""Names a running command's view holds, and the file changes that wait for them.

Why: a protected name is held in a sandboxed command's view by a mount on that
name (:mod:`filegate.backends.sandbox_view`). Replacing or removing the name on
the host (a write is a new file renamed over it; a delete unlinks it or an
ancestor) detaches that mount in the command's namespace, and the command then
sees, and may change, what the rules froze or hid (issue 50: an approved
``write_file /config.json`` in the turn of a command that kept appending to it
ended with the command's text appended; an approved ``delete /docs`` let the
command create ``docs/x.md``).

So the file tools of a sandbox backend order their changes after the commands
that hold the name: a write, edit, upload or delete of a held name, or of an
ancestor of one, waits until those commands have ended, at most
:data:`WAIT_SECONDS`; past that it is refused in one line and nothing changes
(the model may send it again once the command is done). A change below a held
directory replaces no held name and does not wait: the command sees it through
its read-only or empty mount as the rules say.

Scope: the commands of this process on this root. Another process on the same
root (a second worker) is not ordered by this; see docs/threat-model.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from filegate.kernel.execute_gate import SandboxView

WAIT_SECONDS = 20.0
"""How long a change of a held name waits for the commands holding it."""


class HeldNames:
    """The protected names of the commands running now, by root, in this process."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held: dict[int, tuple[str, tuple[str, ...]]] = {}
        self._next = 0

    @contextmanager
    def holding(self, root: str, view: SandboxView) -> Iterator[None]:
        """Hold ``view``'s protected names on ``root`` (a backend's resolved root, as every
        call here takes it) while the block (a command) runs."""
        names = tuple(entry.path for entry in view.protected)
        if not names:
            yield
            return
        with self._changed:
            self._next += 1
            key = self._next
            self._held[key] = (root, names)
        try:
            yield
        finally:
            with self._changed:
                del self._held[key]
                self._changed.notify_all()

    def _holders(self, root: str, target: str) -> list[str]:
        prefix = target.rstrip("/") + "/"
        return [
            name
            for held_root, names in self._held.values()
            if held_root == root
            for name in names
            if name == target or name.startswith(prefix) or target == "/"
        ]

    def wait_until_free(self, root: str, target: str, what: str) -> str | None:
        """Wait until no running command holds ``target`` (or a name below it); the
        one-line refusal when that takes longer than :data:`WAIT_SECONDS`, else None."""
        deadline = time.monotonic() + WAIT_SECONDS
        with self._changed:
            while True:
                holders = self._holders(root, target)
                if not holders:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return (
                        f"{what} {target} was not applied: a command running beside it holds "
                        f"{holders[0]} (protected in its view) and has not ended within "
                        f"{WAIT_SECONDS:g} s; send it again once the command has finished"
                    )
                self._changed.wait(left)


HELD = HeldNames()
"""The process's registry: every sandbox backend of this process shares it."""
