"""Writes keep what they promise (issue 34 item 6), on real files.

The write replaces a file by renaming a temporary file over it. A rename needs
only the directory's permission, so before this fix it replaced files the
worker's user may not write, and gave every replaced file the worker's owner.
Now: a file this user may not write is refused (``permission_denied``) and left
as it was; the replaced file keeps its owner and group where the worker may set
them; a ``write_file`` with ``expected_fingerprint`` (the file as last read)
refuses to overwrite changes made since, and tells the model so. What the
rename still does to hard links is pinned here as documented (docs/limits.md).

Running as root (a container), the "other user" is ``nobody`` in a forked child
that dropped its ids (chmod does not stop root); as another user, the test's
own user, which the file modes stop.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from filegate.activities.tools import FileToolActivities
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.tool_types import ToolOutcome, ToolRequest

NOBODY = 65534
OWNER = 4321
"""A uid/gid no account uses: the owner a root worker must keep."""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A temporary directory another user may enter and write (mode 0777)."""
    with tempfile.TemporaryDirectory(prefix="filegate-promises-") as name:
        os.chmod(name, 0o777)
        yield Path(name)


def as_other_user(fn: Callable[[], str]) -> str:
    """``fn()`` run by a user who does not own the test's files (a forked child as root)."""
    if os.geteuid() != 0:
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            os.write(write, fn().encode())
        except BaseException as exc:
            os.write(write, f"child failed: {exc!r}".encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        out = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    return out


def test_a_file_the_user_may_not_write_is_refused_not_replaced(shared_dir: Path) -> None:
    """Old code: the rename replaced the read-only file (the directory allowed it)."""
    root = shared_dir / "ws"
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)
    target = root / "locked.txt"
    target.write_text("keep me\n")
    os.chmod(target, 0o444)  # nobody (or this user) may not write it
    backend = FilesystemBackend(root)

    def write() -> str:
        result = backend.write("/locked.txt", "replaced\n")
        return f"{result.code}|{result.error}"

    code, error = as_other_user(write).split("|", 1)
    assert target.read_text() == "keep me\n"
    assert code == "permission_denied", error
    assert str(root) not in error
    assert not [p for p in root.iterdir() if "filegate-tmp" in p.name]
    # A file it may write is still replaced, and a new one still created.
    os.chmod(target, 0o666)
    assert as_other_user(write).startswith("None|")
    assert target.read_text() == "replaced\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file another owner")
def test_owner_group_and_mode_are_kept(tmp_path: Path) -> None:
    """Old code: the replaced file became root's (the worker's)."""
    target = tmp_path / "owned.sh"
    target.write_text("echo old\n")
    os.chown(target, OWNER, OWNER)
    os.chmod(target, 0o750)
    result = FilesystemBackend(tmp_path).write("/owned.sh", "echo new\n")
    assert result.error is None, result
    st = target.stat()
    assert (st.st_uid, st.st_gid) == (OWNER, OWNER)
    assert stat.S_IMODE(st.st_mode) == 0o750
    assert target.read_text() == "echo new\n"


def test_hard_links_keep_the_old_content_as_documented(tmp_path: Path) -> None:
    """The rename write gives the name a new file: other links keep the old one."""
    (tmp_path / "a.txt").write_text("one\n")
    os.link(tmp_path / "a.txt", tmp_path / "b.txt")
    assert FilesystemBackend(tmp_path).write("/a.txt", "two\n").error is None
    assert (tmp_path / "a.txt").read_text() == "two\n"
    assert (tmp_path / "b.txt").read_text() == "one\n"
    limits = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    assert "hard link" in limits and "open" in limits


# --------------------------------------------------------------------------- expected fingerprint


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def _write(
    tools: FileToolActivities, content: str, expected: str | None, call: str
) -> ToolOutcome:
    request = ToolRequest(
        tool="write_file",
        backend="fs",
        args={"file_path": "/notes.md", "content": content},
        tool_call_id=call,
        virtual_path="/notes.md",
        expected_fingerprint=expected,
    )
    outcome: ToolOutcome = await ActivityEnvironment().run(tools.write_file, request)
    return outcome


@pytest.mark.slow
async def test_write_file_refuses_to_overwrite_changes_made_since_the_last_read(
    tmp_path: Path,
) -> None:
    """Old code: ``expected_fingerprint`` did not exist; the stale write overwrote."""
    root = tmp_path / "ws"
    root.mkdir()
    notes = root / "notes.md"
    notes.write_text("as the model read it\n")
    read_fingerprint = _sha(notes.read_bytes())
    tools = FileToolActivities({"fs": FilesystemBackend(root)}, tmp_path / "journal")

    notes.write_text("changed by someone else\n")
    refused = await _write(tools, "the model's version\n", read_fingerprint, "c1")
    assert refused.status == "error"
    text = str(refused.content)
    assert "/notes.md was changed since you last read it" in text and "not overwritten" in text
    assert str(tmp_path) not in text
    assert notes.read_text() == "changed by someone else\n"
    # The refusal is the call's answer for good: a retry gives it again.
    assert (await _write(tools, "the model's version\n", read_fingerprint, "c1")) == refused
    assert notes.read_text() == "changed by someone else\n"

    fresh = _sha(notes.read_bytes())
    done = await _write(tools, "the model's version\n", fresh, "c2")
    assert done.status == "success", done
    assert notes.read_text() == "the model's version\n"

    # Expecting no file (``missing``) while one exists is refused too; no
    # expectation writes as before.
    gone = await _write(tools, "x\n", "missing", "c3")
    assert gone.status == "error" and "changed since you last read it" in str(gone.content)
    assert (await _write(tools, "y\n", None, "c4")).status == "success"
    notes.unlink()
    deleted = await _write(tools, "z\n", _sha(b"y\n"), "c5")
    assert "was deleted since you last read it" in str(deleted.content)
    assert not notes.exists()
