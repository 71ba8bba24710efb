"""The ripgrep search of the filesystem backend: run ``rg``, parse, re-filter.

ripgrep walks and searches far faster than Python, but it does not know our
path rules: every path it reports goes back through the virtual-path mapping
and our own :class:`~filegate.kernel.globbing.GrepFileFilter`, and files it
calls binary (or that fail the whole-file text check) are dropped, so the
result equals the pure-Python walk (:mod:`filegate.backends.fs_walk`).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable

from filegate.backends.host_files import utf8_name
from filegate.kernel.globbing import GrepFileFilter, spells_dot
from filegate.kernel.protocol import GrepMatch
from filegate.kernel.textops import display_line

_RG_ENV_PATH = "/usr/local/bin:/usr/bin:/bin"


def grep_rg(
    rg: str,
    cwd: str,
    host_root: str,
    literal: str,
    flt: GrepFileFilter,
    glob: str | None,
    per_file: int | None,
    vpath_of_host: Callable[[str], str | None],
    is_text_file: Callable[[str], bool],
) -> list[GrepMatch]:
    """ripgrep walks and searches; our filter then has the last word on paths."""
    # Plain "path NUL number:text" output: several times cheaper to parse than --json.
    cmd = [rg, "--fixed-strings", "--no-config", "--no-ignore", "--encoding", "none"]
    cmd += ["--no-messages", "--color", "never", "--no-heading", "--with-filename"]
    cmd += ["--line-number", "--null"]
    if per_file is not None:
        cmd += ["--max-count", str(per_file)]
    if glob and spells_dot(glob):
        cmd.append("--hidden")
    prefilter = rg_prefilter(glob)
    if prefilter is not None:
        cmd += ["--glob", prefilter]
    cmd += ["--regexp", literal, "--", host_root]
    proc = subprocess.run(
        cmd, capture_output=True, env={"PATH": _RG_ENV_PATH}, check=False, cwd=cwd
    )
    if proc.returncode not in (0, 1, 2):
        raise OSError(errno.EIO, f"ripgrep failed: {proc.stderr[:200]!r}")
    found: list[GrepMatch] = []
    binary: set[str] = set()
    accepted: dict[bytes, str | None] = {}  # host path -> virtual path (None: filtered)
    for raw in proc.stdout.split(b"\n"):
        host, sep, rest = raw.partition(b"\x00")
        if not sep:
            continue
        if host not in accepted:
            vpath = vpath_of_host(os.fsdecode(host))
            ok = vpath is not None and utf8_name(vpath) and flt.wants(vpath)
            accepted[host] = vpath if ok else None
        vpath = accepted[host]
        if vpath is None:
            continue
        number, sep, text = rest.partition(b":")
        try:
            line = text.decode("utf-8")
            line_no = int(number)
        except ValueError:  # undecodable line or a "binary file matches" notice
            binary.add(vpath)
            continue
        found.append(GrepMatch.model_construct(path=vpath, line=line_no, text=display_line(line)))
    matched = {m.path for m in found}
    binary |= {p for p in matched - binary if not is_text_file(p)}
    return [m for m in found if m.path not in binary]


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
