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
