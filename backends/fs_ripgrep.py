"""The ripgrep search of the filesystem backend: rg picks candidate files, we read them.

ripgrep walks and searches far faster than Python, but it knows neither our
path rules nor our root: it works with path strings, so a directory swapped
for a symlink mid-walk could lead it outside the root. So rg only *lists*
the files that contain the literal (``--files-with-matches``), running with
its working directory set to the search root's descriptor (opened without
following links, passed as ``/proc/self/fd/N``); every file it names goes
through our :class:`~filegate.kernel.globbing.GrepFileFilter` and the
caller's ``visible`` predicate, and is then opened again, component by
component without following links, below that same descriptor and scanned
by :func:`~filegate.backends.streams.scan_stream`. Matches, line numbers
and binary detection are therefore exactly those of the pure-Python walk
(:mod:`filegate.backends.fs_walk`), and the text always comes from a file
inside the root, whatever rg saw.
"""

from __future__ import annotations

import errno
import os
import subprocess

from filegate.backends.fs_walk import open_below
from filegate.backends.host_files import utf8_name
from filegate.backends.streams import scan_stream
from filegate.kernel.globbing import GrepFileFilter, spells_dot
from filegate.kernel.protocol import GrepMatch, Visible

_RG_ENV_PATH = "/usr/local/bin:/usr/bin:/bin"


def grep_rg(
    rg: str,
    dfd: int,
    literal: str,
    vroot: str,
    flt: GrepFileFilter,
    glob: str | None,
    per_file: int | None,
    visible: Visible | None = None,
) -> list[GrepMatch]:
    """Search the directory ``dfd`` (virtual ``vroot``): rg lists, our no-follow reads decide."""
    cmd = [rg, "--fixed-strings", "--no-config", "--no-ignore", "--encoding", "none"]
    cmd += ["--no-messages", "--color", "never", "--files-with-matches", "--null"]
    if glob and spells_dot(glob):
        cmd.append("--hidden")
    prefilter = rg_prefilter(glob)
    if prefilter is not None:
        cmd += ["--glob", prefilter]
    cmd += ["--regexp", literal, "--", "."]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        env={"PATH": _RG_ENV_PATH},
        check=False,
        cwd=f"/proc/self/fd/{dfd}",
        pass_fds=(dfd,),
    )
    if proc.returncode not in (0, 1, 2):
        raise OSError(errno.EIO, f"ripgrep failed: {proc.stderr[:200]!r}")
    base = vroot.rstrip("/") + "/"
    found: list[GrepMatch] = []
    for raw in sorted(set(proc.stdout.split(b"\x00"))):
        rel = os.fsdecode(raw)
        rel = rel[2:] if rel.startswith("./") else rel
        vpath = base + rel
        if not rel or not utf8_name(rel) or not flt.wants(vpath):
            continue
        if visible is not None and not visible(vpath):
            continue
        try:
            fd = open_below(dfd, rel)
        except OSError:
            continue  # vanished, or a component became a symlink: not ours to read
        with os.fdopen(fd, "rb", buffering=0) as fh:
            hits = scan_stream(fh, literal, vpath, per_file)
        if hits:
            found.extend(hits)
    return found


def rg_prefilter(glob: str | None) -> str | None:
    """A ripgrep ``--glob`` that is a superset of ours, or None when unsure.

    Only plain basename patterns (literals, ``*``, braces) are handed over;
    our own filter still decides every path.
    """
    if not glob or "/" in glob:
        return None
    if any(ch in glob for ch in "[]?\\!"):
        return None
    return glob
