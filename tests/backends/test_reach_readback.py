"""Where an open object is, read back from the kernel, is judged by its name (issue 50).

``/proc/self/fd`` names an object removed or replaced since its open
``<path> (deleted)``; the old code judged that decorated string, which no name
rule matches (``deny read **/*.pem`` let a racing read through, 1 in 20 000).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from filegate.backends.filesystem.host_files import reached_path
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.reach import check_reach, judged_at_reach, reach_for


def test_a_removed_or_replaced_file_reads_back_as_the_name_it_had(tmp_path: Path) -> None:
    root = str(tmp_path)
    for how in ("unlink", "replace"):
        key = tmp_path / "key.pem"
        key.write_text("SECRET")
        fd = os.open(key, os.O_RDONLY)
        try:
            if how == "unlink":
                key.unlink()
            else:
                (tmp_path / "new.pem").write_text("NEW")
                os.replace(tmp_path / "new.pem", key)
            assert reached_path(root, fd, ["key.pem"]) == "/key.pem", how
            rules = [FilesystemPermission(operations=["read"], paths=["/**/*.pem"], mode="deny")]
            with judged_at_reach(reach_for(rules)), pytest.raises(PermissionError):
                check_reach("read", reached_path(root, fd, ["key.pem"]))
        finally:
            os.close(fd)


def test_a_name_that_ends_like_the_decoration_is_its_own(tmp_path: Path) -> None:
    odd = tmp_path / "notes (deleted)"
    odd.write_text("x")
    fd = os.open(odd, os.O_RDONLY)
    try:
        assert reached_path(str(tmp_path), fd, ["notes (deleted)"]) == "/notes (deleted)"
    finally:
        os.close(fd)


def test_a_refused_path_never_counts_as_judged_for_the_next_item(tmp_path: Path) -> None:
    """A transfer batch goes on after a refused item, under one guard: the old gate noted
    the refused path as judged before refusing it, so another item that reached it (a
    link re-pointed after its own check) passed the backend's last check."""
    from filegate.backends.filesystem import FilesystemBackend
    from filegate.kernel.gates import entry_refused
    from filegate.kernel.reach import ReachRefused
    from filegate.kernel.tool_types import ToolRequest

    (tmp_path / "secret.txt").write_text("TOP-SECRET")
    (tmp_path / "decoy.txt").write_text("decoy")
    backend = FilesystemBackend(tmp_path, virtual_mode=True)
    rules = [FilesystemPermission(operations=["read"], paths=["/secret.txt"], mode="deny")]

    def probe(path: str) -> ToolRequest:
        return ToolRequest(
            tool="read_file", backend="fs", args={"file_path": path}, tool_call_id="t",
            permissions=rules,
        )  # fmt: skip

    with judged_at_reach(reach_for(rules)):
        assert entry_refused(backend, probe("/secret.txt"), "read", "/secret.txt") is not None
        assert entry_refused(backend, probe("/decoy.txt"), "read", "/decoy.txt") is None
        check_reach("read", "/decoy.txt")  # judged and allowed: passes
        with pytest.raises(ReachRefused):
            check_reach("read", "/secret.txt")  # where a re-pointed link would lead
