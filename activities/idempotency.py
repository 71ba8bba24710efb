"""Exactly-once effects for write/edit/delete/execute across activity retries.

Temporal retries an activity whose worker died before reporting, even when the
work itself was done. Each mutating call is therefore journaled on the tools
worker's disk, keyed by (backend, run chain, tool call id, tool, args):

1. before applying, an *intent* is stored: a fingerprint of the target's state
   (``pre``) and, where it can be predicted, the state a successful apply
   leaves behind (``post``);
2. the operation is applied;
3. the outcome is stored next to the intent.

A retry that finds an outcome returns it unchanged. A retry that finds only an
intent (the worker died between 2 and 3) decides from the target's current
state: ``post`` reached means the first attempt applied, so its success is
rebuilt without touching anything; ``pre`` still there means it never applied,
so it is applied now. ``execute`` has no observable post-state, so an
interrupted command is reported as "may have run" instead of being re-run.

Entries are written atomically (temp file, fsync, rename, directory fsync) and
one attempt at a time per key (``flock``), so a slow old attempt and its retry
cannot interleave on the same worker host.

When the journal's disk fails (full, read-only), the model is told exactly what
happened to its files: before the change (no lock or intent stored) nothing is
applied and the call ends at once in one sentence naming no host path
(:class:`JournalUnavailable`, non-retryable); a ``delete`` whose intent does not
fit on a full disk leaves an empty marker instead (its intent is only "target
gone"), so an agent sharing the journal's full disk can still free space; after
the change, storing the outcome is best effort (the intent lets a retry rebuild
the success), so an applied change is always reported applied.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel

from filegate.activities.journal_faults import JournalUnavailable, journal_reason
from filegate.backends.filesystem.host_files import named_for_call
from filegate.kernel.dispatch import render_mutation, to_virtual
from filegate.kernel.formatting import format_error
from filegate.kernel.protocol import BackendProtocol, DeleteResult, EditResult, WriteResult
from filegate.kernel.registry import TOOLS
from filegate.kernel.textops import MISSING_FINGERPRINT, apply_edit, decode_text
from filegate.kernel.textops import fingerprint as fingerprint_of
from filegate.kernel.tool_types import (
    DeleteArgs,
    EditFileArgs,
    ToolOutcome,
    ToolRequest,
    WriteFileArgs,
)

CRASH_AFTER_APPLY_ENV = "FILEGATE_TEST_CRASH_AFTER_APPLY"
"""Test hook: when set to a tool call id, the process exits with status 137 right
after applying that call and before journaling its outcome (the crash window)."""

MISSING = MISSING_FINGERPRINT
"""Fingerprint of a path that does not exist."""

DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0
"""Journal entries older than this are pruned: retries never come that late."""

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")

MIN_FREE_BYTES = 1024 * 1024
"""Free space a tools worker's journal needs at start (about 250 entries)."""

_log = logging.getLogger(__name__)


def open_journal(root: str | os.PathLike[str], *, fsync: bool = False) -> ToolJournal:
    """A tools worker's journal, probed: raises :class:`JournalUnavailable` when it
    cannot take an entry now (read-only, full), so the worker refuses to start
    instead of failing every mutating call later."""
    try:
        journal = ToolJournal(root, fsync=fsync)
    except OSError as exc:
        raise JournalUnavailable(journal_reason(exc)) from None
    journal.probe()
    return journal


class Intent(BaseModel):
    """What the journal knows before applying."""

    pre: str | None = None
    post: str | None = None
    occurrences: int = 0


class JournalEntry(BaseModel):
    backend: str
    workflow_id: str
    """The run chain's scope (``<workflow id>@<first run id>``)."""
    tool_call_id: str
    tool: str
    intent: Intent
    outcome: ToolOutcome | None = None
    created_at: float = 0.0


def fingerprint(backend: BackendProtocol, path: str) -> str:
    """A short token for a path's current state: content hash, ``missing`` or ``other:<code>``."""
    [result] = backend.download([path])
    if result.error is None and result.content is not None:
        return fingerprint_of(result.content)
    if result.code == "file_not_found":
        return MISSING
    return f"other:{result.code or 'error'}"


def _intent_for(backend: BackendProtocol, args: BaseModel) -> Intent:
    """Fingerprint the target and predict the state a successful apply leaves."""
    if isinstance(args, WriteFileArgs):
        pre = fingerprint(backend, args.file_path)
        return Intent(pre=pre, post=fingerprint_of(args.content.encode("utf-8")))
    if isinstance(args, EditFileArgs):
        [current] = backend.download([args.file_path])
        if current.error is not None or current.content is None:
            return Intent(pre=fingerprint(backend, args.file_path))
        pre = fingerprint_of(current.content)
        text = decode_text(current.content)
        if text is None:
            return Intent(pre=pre)
        new_text, result = apply_edit(
            args.file_path, text, args.old_string, args.new_string, args.replace_all
        )
        if new_text is None:
            return Intent(pre=pre)
        return Intent(
            pre=pre, post=fingerprint_of(new_text.encode("utf-8")), occurrences=result.occurrences
        )
    if isinstance(args, DeleteArgs):
        return Intent(pre=fingerprint(backend, args.file_path), post=MISSING)
    return Intent()


def _with_fingerprint(result: ToolOutcome, intent: Intent) -> ToolOutcome:
    """A successful write or edit, with the file's fingerprint as the change left it.

    The workflow sends it back with the next ``write_file`` of the path: the
    run's own change is known, so only a change made by someone else refuses."""
    if result.status != "success" or not (intent.post or "").startswith("sha256:"):
        return result
    return result.model_copy(update={"fingerprint": intent.post})


def _applied_result(args: BaseModel, intent: Intent) -> WriteResult | EditResult | DeleteResult:
    """The backend result a successful first attempt returned, rebuilt from the intent."""
    if isinstance(args, WriteFileArgs):
        return WriteResult(path=args.file_path)
    if isinstance(args, EditFileArgs):
        return EditResult(path=args.file_path, occurrences=intent.occurrences)
    assert isinstance(args, DeleteArgs)
    return DeleteResult(path=args.file_path)


def _stale_write(request: ToolRequest, args: BaseModel, intent: Intent) -> ToolOutcome | None:
    """The refusal of a ``write_file`` over changes made since the model's last read.

    ``request.expected_fingerprint`` is the file as last read; ``intent.pre``
    is the file now, taken under the journal's lock just before the write."""
    expected = request.expected_fingerprint
    if expected is None or not isinstance(args, WriteFileArgs) or intent.pre == expected:
        return None
    shown = request.virtual_path or to_virtual(request.route_prefix, args.file_path)
    now = "was deleted" if intent.pre == MISSING else "was changed"
    return ToolOutcome(
        content=format_error(
            f"{shown} {now} since you last read it (outside this run), so it was not "
            "overwritten. Read it again and redo the write if it is still needed.",
            "conflict",
        ).text,
        status="error",
        code="conflict",
    )


def _interrupted_execute_outcome() -> ToolOutcome:
    return ToolOutcome(
        content=format_error(
            "the worker running this command stopped before reporting its result, so the "
            "command may or may not have run. It was not run again. Check the workspace "
            "(e.g. with ls or read_file) before deciding whether to run it again.",
            "failed",
        ).text,
        status="error",
        code="failed",
    )


def _concurrent_change_outcome(path: str) -> ToolOutcome:
    return ToolOutcome(
        content=format_error(
            f"{path} changed while this edit was being retried, so it was not applied "
            "again. Read the file and repeat the edit if it is still needed.",
            "conflict",
        ).text,
        status="error",
        code="conflict",
    )


STALL_BEFORE_APPLY_ENV = "FILEGATE_TEST_STALL_BEFORE_APPLY"
"""Test hook: when set to a tool call id, that call sleeps a minute after journaling
its intent and before applying (a worker killed mid-edit, the edit not yet on disk)."""


def _stall_if_requested(tool_call_id: str) -> None:
    """The mid-call test hook (see :data:`STALL_BEFORE_APPLY_ENV`)."""
    if tool_call_id and os.environ.get(STALL_BEFORE_APPLY_ENV) == tool_call_id:
        time.sleep(60)


def _crash_if_requested(tool_call_id: str) -> None:
    """The crash-window test hook (see :data:`CRASH_AFTER_APPLY_ENV`)."""
    if tool_call_id and os.environ.get(CRASH_AFTER_APPLY_ENV) == tool_call_id:
        os._exit(137)


class ToolJournal:
    """The per-worker journal of mutating tool calls (one JSON file per call)."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = False) -> None:
        """``fsync`` (``JournalSettings.fsync``, ``FILEGATE_JOURNAL_FSYNC``) makes every entry
        survive a power cut, at four disk flushes per mutating call. Off, an entry
        still survives any process crash (atomic rename, page cache), which is
        the failure the journal exists for, and as durable as the backend's own
        unsynced writes it records."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._made: set[Path] = set()
        self.fsync = fsync  # given, never read here: the caller owns configuration

    # ------------------------------------------------------------------ storage

    @staticmethod
    def key(backend_name: str, request: ToolRequest, args: BaseModel, scope: str) -> str:
        """Retries carry identical args; a reused call id with other args is another call.

        ``scope`` is the run chain (from the activity's own info): a new run under a
        reused workflow id starts a new chain, so it never gets an old run's answers.
        """
        material = json.dumps(
            [
                backend_name,
                scope,
                request.tool_call_id,
                request.tool,
                args.model_dump(mode="json"),
            ],
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def entry_path(self, backend_name: str, key: str) -> Path:
        return self.root / _SAFE_NAME.sub("_", backend_name) / f"{key}.json"

    def load(self, path: Path) -> JournalEntry | None:
        try:
            return JournalEntry.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None

    @staticmethod
    def marker_path(path: Path) -> Path:
        """The empty file that records a ``delete``'s intent when no entry fits."""
        return path.with_suffix(".delete-intent")

    def probe(self, min_free_bytes: int = MIN_FREE_BYTES) -> None:
        """Raise :class:`JournalUnavailable` unless the journal takes an entry now
        (see :func:`open_journal`)."""
        probe = self.root / f".probe-{os.getpid()}"
        entry = JournalEntry(backend="", workflow_id="", tool_call_id="", tool="", intent=Intent())
        try:
            self.store(probe, entry)
            probe.unlink()
            stats = os.statvfs(self.root)
        except OSError as exc:
            raise JournalUnavailable(journal_reason(exc)) from None
        free = stats.f_bavail * stats.f_frsize
        if free < min_free_bytes:
            raise JournalUnavailable(
                f"its journal disk has {free // 1024} KiB free, "
                f"less than the {min_free_bytes // 1024} KiB a worker needs"
            )

    def store(self, path: Path, entry: JournalEntry) -> None:
        """Atomically replace ``path`` with ``entry`` (flushed to disk with ``fsync``).

        Called under the entry's lock, so one temporary name per entry is enough;
        one a crashed writer left behind is truncated and reused."""
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                data = memoryview(entry.model_dump_json().encode("utf-8"))
                while data:
                    data = data[os.write(fd, data) :]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if not self.fsync:
            return
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _directory(self, path: Path) -> None:
        """Create the entry's backend directory once per journal."""
        if path.parent not in self._made:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._made.add(path.parent)

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        """Hold the entry's lock, on a read-only descriptor (flock needs no write):
        on a journal that turned read-only, the lock a first attempt made still
        serves its retry, which can then answer from the entry stored before."""
        self._directory(path)
        fd = os.open(path.with_suffix(".lock"), os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def prune(self, max_age_seconds: float = DEFAULT_RETENTION_SECONDS) -> int:
        """Delete entries (and locks) older than ``max_age_seconds``; returns how many."""
        cutoff = time.time() - max_age_seconds
        removed = 0
        for path in self.root.glob("*/*"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
        return removed

    # ------------------------------------------------------------------ the protocol

    def run(
        self,
        backend_name: str,
        backend: BackendProtocol,
        request: ToolRequest,
        args: BaseModel,
        apply: Callable[[], ToolOutcome],
        *,
        scope: str,
    ) -> ToolOutcome:
        """Apply a mutating call at most once per key; return its (original) outcome."""
        key = self.key(backend_name, request, args, scope)
        path = self.entry_path(backend_name, key)
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._locked(path))
                entry = self._load_any(path, args)
            except OSError as exc:
                raise JournalUnavailable(journal_reason(exc)) from None
            if entry is not None and entry.outcome is not None:
                return entry.outcome
            if entry is None:
                entry = JournalEntry(
                    backend=backend_name,
                    workflow_id=scope,
                    tool_call_id=request.tool_call_id,
                    tool=request.tool,
                    intent=_intent_for(backend, args),
                    created_at=time.time(),
                )
                stale = _stale_write(request, args, entry.intent)
                if stale is not None:
                    entry.outcome = stale
                self._store_intent(path, entry, args)
                recovered = stale
            else:
                recovered = self._recover(backend, request, args, entry.intent)
            if recovered is None:
                _stall_if_requested(request.tool_call_id)
                with named_for_call(key[:16]):
                    result = apply()
                _crash_if_requested(request.tool_call_id)
            else:
                result = recovered
            if entry.outcome is None:
                entry.outcome = _with_fingerprint(result, entry.intent)
                self._store_outcome(path, entry)
            return entry.outcome

    def _load_any(self, path: Path, args: BaseModel) -> JournalEntry | None:
        """The entry at ``path``, or the intent a delete's marker records, or None."""
        entry = self.load(path)
        if entry is not None or not isinstance(args, DeleteArgs):
            return entry
        if not self.marker_path(path).exists():
            return None
        return JournalEntry(
            backend="", workflow_id="", tool_call_id="", tool="delete", intent=Intent(post=MISSING)
        )

    def _store_intent(self, path: Path, entry: JournalEntry, args: BaseModel) -> None:
        """Store the intent before applying, or raise :class:`JournalUnavailable`.

        A delete whose entry does not fit leaves an empty marker instead (an
        empty file needs no data block), so the agent can still free space."""
        try:
            self.store(path, entry)
            return
        except OSError as exc:
            reason = journal_reason(exc)
        if isinstance(args, DeleteArgs):
            try:
                self.marker_path(path).touch()
                return
            except OSError:
                pass
        raise JournalUnavailable(reason)

    def _store_outcome(self, path: Path, entry: JournalEntry) -> None:
        """Store an applied call's outcome, best effort: failing the call now would
        tell the model it was not applied, and it would apply it again. The
        intent stays, so a retry rebuilds this outcome from the target's state."""
        try:
            self.store(path, entry)
        except OSError as exc:
            _log.warning(
                "journal: the outcome of %s %s was not stored (%s); a retry rebuilds it",
                entry.tool, entry.tool_call_id, exc,
            )  # fmt: skip
            return
        with contextlib.suppress(OSError):
            self.marker_path(path).unlink(missing_ok=True)

    def _recover(
        self, backend: BackendProtocol, request: ToolRequest, args: BaseModel, intent: Intent
    ) -> ToolOutcome | None:
        """Outcome for an intent left without a result, or None to apply now."""
        if request.tool in TOOLS.running:
            return _interrupted_execute_outcome()
        target = getattr(args, "file_path", None)
        assert isinstance(target, str)
        current = fingerprint(backend, target)
        if intent.post is not None and current == intent.post and intent.pre != intent.post:
            # (pre == post: a delete of a missing file, or a write of what was
            # there; applying again answers as the first attempt did.)
            return render_mutation(request, _applied_result(args, intent))
        if current == intent.pre or not isinstance(args, EditFileArgs):
            # Never applied (or a write/delete, which converge when applied again).
            return None
        return _concurrent_change_outcome(to_virtual(request.route_prefix, target))
