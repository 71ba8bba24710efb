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
(:mod:`filegate.backends.filesystem.walk`), and the text always comes from a file
inside the root, whatever rg saw.

Under a :class:`~filegate.backends.filesystem.search_clock.SearchClock` (contract §1,
partial results): rg, in a process group of its own, is killed when the
clock expires and the names it had listed in full are kept (a name cut off
mid-write has no terminating NUL yet and is dropped); the candidates are then
read in sorted order until the clock says stop, after at least one.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from contextlib import suppress

from filegate.backends.filesystem.host_files import utf8_name
from filegate.backends.filesystem.search_clock import SearchClock
from filegate.backends.filesystem.walk import open_below
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
    clock: SearchClock | None = None,
) -> list[GrepMatch]:
    """Search the directory ``dfd`` (virtual ``vroot``): rg lists, our no-follow reads decide.

    With ``clock``, the matches found before it expired (see the module docstring).
    """
    clock = SearchClock() if clock is None else clock
    cmd = [rg, "--fixed-strings", "--no-config", "--no-ignore", "--encoding", "none"]
    cmd += ["--no-messages", "--color", "never", "--files-with-matches", "--null"]
    if glob and spells_dot(glob):
        cmd.append("--hidden")
    prefilter = _rg_prefilter(glob)
    if prefilter is not None:
        cmd += ["--glob", prefilter]
    cmd += ["--regexp", literal, "--", "."]
    base = vroot.rstrip("/") + "/"
    found: list[GrepMatch] = []
    read = 0
    for raw in sorted(set(_listed(cmd, dfd, clock))):
        if read and clock.expired():
            break  # candidates remain unread: the answer is partial
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
        read += 1
        if hits:
            found.extend(hits)
    return found


def _listed(cmd: list[str], dfd: int, clock: SearchClock) -> list[bytes]:
    """The file names rg prints, or those it had printed in full when ``clock`` expired.

    rg gets a process group of its own (killed whole on expiry, and by the
    tool thread's stop, :func:`filegate.activities.tool_threads.kill_children`).
    """
    with subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": _RG_ENV_PATH},
        cwd=f"/proc/self/fd/{dfd}",
        pass_fds=(dfd,),
        process_group=0,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=clock.remaining())
        except subprocess.TimeoutExpired:
            _kill(proc)
            out, _ = proc.communicate()  # what rg wrote before it was killed
            clock.stopped = True
            return complete_names(out)
        except BaseException:
            _kill(proc)
            raise
    if proc.returncode not in (0, 1, 2):
        raise OSError(errno.EIO, f"ripgrep failed: {err[:200]!r}")
    return complete_names(out)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def complete_names(out: bytes) -> list[bytes]:
    """The NUL-terminated names of rg's ``--null`` output, without empty ones.

    Whatever follows the last NUL is dropped: empty when rg finished, the
    start of a name when it was killed mid-write.
    """
    return [name for name in out.split(b"\x00")[:-1] if name]


def _rg_prefilter(glob: str | None) -> str | None:
    """A ripgrep ``--glob`` that is a superset of ours, or None when unsure.

    Only plain basename patterns (literals, ``*``, braces) are handed over;
    our own filter still decides every path.
    """
    if not glob or "/" in glob:
        return None
    if any(ch in glob for ch in "[]?\\!"):
        return None
    return glob
