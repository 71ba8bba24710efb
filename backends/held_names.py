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

Scope: every command on this root, in any worker process that serves it: the
holds are shared locks on the root directory (:mod:`filegate.backends.root_locks`),
so a second sandbox worker's file tools wait for this one's commands too. A
command can hold such a lock itself (it sees the root as its workspace); that
only makes a change of that name wait while the command runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from filegate.backends.root_locks import RootHolds, in_use
from filegate.kernel.execute_gate import SandboxView

WAIT_SECONDS = 20.0
"""How long a change of a held name waits for the commands holding it."""

POLL_SECONDS = 0.05
"""How often a waiting change looks again (the holders may be in other processes)."""


def _key(name: str) -> str:
    return "held:" + name


def _with_ancestors(name: str) -> list[str]:
    """``/a/b`` -> ``/``, ``/a``, ``/a/b``: a change of any of them replaces or removes it."""
    parts = [part for part in name.split("/") if part]
    return ["/" + "/".join(parts[:depth]) for depth in range(len(parts) + 1)]


@contextmanager
def holding(root: str, view: SandboxView) -> Iterator[None]:
    """Hold ``view``'s protected names on ``root`` (a backend's resolved root, as every
    call here takes it) while the block (a command) runs.

    Each name is held with its ancestors, so a change of ``target`` asks one
    question: is ``target`` held, itself or as an ancestor of a held name?"""
    keys = {_key(path) for entry in view.protected for path in _with_ancestors(entry.path)}
    holds = RootHolds(root)
    try:
        for key in sorted(keys):
            holds.hold(key)
        yield
    finally:
        holds.close()


def wait_until_free(root: str, target: str, what: str) -> str | None:
    """Wait until no running command holds ``target`` (or a name below it); the
    one-line refusal when that takes longer than :data:`WAIT_SECONDS`, else None."""
    deadline = time.monotonic() + WAIT_SECONDS
    while in_use(root, _key(target)):
        left = deadline - time.monotonic()
        if left <= 0:
            return (
                f"{what} {target} was not applied: a command running beside it holds "
                f"{target} or a name below it (protected in its view) and has not ended "
                f"within {WAIT_SECONDS:g} s; send it again once the command has finished"
            )
        time.sleep(min(POLL_SECONDS, left))
    return None
