"""PolicyBackend: any backend behind an ordered list of policies.

The wrapper implements *every* protocol method itself (checked at import time
against :data:`PROTOCOL_METHODS`), so a policy cannot be bypassed through a
method it forgot; there is no ``__getattr__`` passthrough. It validates paths,
asks each policy (``admit`` once per call, ``check`` once per target), runs
the inner backend and hands every target to the audit hookup
(:mod:`.recording`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from filegate.backends.audit import (
    AuditSink,
)
from filegate.backends.policy.base import Call, Policy, Refusal
from filegate.backends.policy.recording import record_call
from filegate.kernel.execute_gate import SandboxView, forwarded_view_executor, view_executor
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.paths import validate_path
from filegate.kernel.protocol import (
    PROTOCOL_METHODS,
    BackendProtocol,
    BackendResult,
    DeleteResult,
    DeleteTree,
    EditResult,
    ExecuteResult,
    FileDownloadResult,
    FileUploadResult,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    ReferenceNames,
    Visible,
    WriteResult,
)
from filegate.kernel.reach import ReachOp, also_judged, settled
from filegate.kernel.textops import decode_text
from filegate.kernel.visibility import (
    resolve_all,
    resolve_in_backend,
    resolve_link_itself,
    targets,
)

R = TypeVar("R", bound=BackendResult)


# --------------------------------------------------------------------------- #
# The wrapper
# --------------------------------------------------------------------------- #


def _refused(result_type: type[R], path: str | None, refusal: Refusal) -> R:
    """The error value of a refusal. A policy's refusal is about the call's path, which
    it does not name itself: the path travels as ``error_path`` (kernel.protocol), so a
    route shows its virtual form. The wrapper's own invalid-path refusal quotes the
    raw path in its message and names no ``error_path``."""
    error_path = path if refusal.policy is not None else None
    result = result_type(error=refusal.message, code=refusal.code, error_path=error_path)
    if path is not None and "path" in result_type.model_fields:
        result.path = path  # type: ignore[attr-defined]
    return result


class PolicyBackend(ReferenceNames):
    """Any backend, behind an ordered list of policies and an optional audit sink."""

    def __init__(
        self,
        inner: BackendProtocol,
        policies: Sequence[Policy] = (),
        audit: AuditSink | None = None,
    ) -> None:
        self.inner = inner
        self.policies = tuple(policies)
        self.audit = audit

    # -- capabilities --------------------------------------------------------

    @property
    def can_execute(self) -> bool:
        return self.inner.can_execute and all(p.permits("execute") for p in self.policies)

    @property
    def can_delete(self) -> bool:
        return self.inner.can_delete and all(p.permits("delete") for p in self.policies)

    # -- the guard -----------------------------------------------------------

    def _admit(self, operation: str) -> Refusal | None:
        for policy in self.policies:
            refusal = policy.admit(operation)
            if refusal is not None:
                return refusal
        return None

    def _check(self, call: Call, judged: set[str] | None = None) -> Refusal | None:
        """Every policy judges the path as written and its in-root symlink target.

        ``judged`` collects the paths judged, for :meth:`_reach_judge`."""
        for target in self._judged(call):
            if judged is not None and target.path is not None:
                judged.add(target.path.rstrip("/") or "/")
            refusal = self._verdict(target)
            if refusal is not None:
                return refusal
        return None

    def _verdict(self, call: Call) -> Refusal | None:
        for policy in self.policies:
            refusal = policy.check(call, self.inner)
            if refusal is not None:
                return refusal
        return None

    def _reach_judge(self, call: Call, judged: set[str]) -> _PolicyJudge:
        """The policies as a judge of what the inner backend reached (kernel.reach)."""
        return _PolicyJudge(self, call, judged)

    def _judged(self, call: Call) -> list[Call]:
        if call.path is None or call.operation == "execute":
            return [call]
        if call.operation == "delete":  # a link itself is deleted, not its target
            resolved = resolve_link_itself(self.inner, call.path)
        else:
            resolved = resolve_in_backend(self.inner, call.path)
        return [replace(call, path=path) for path in targets(call.path, resolved)]

    # -- symlink resolution (kernel.visibility), for the dispatcher's rules --

    def resolve_path(self, path: str) -> str | None:
        return resolve_in_backend(self.inner, path)

    def resolve_paths(self, paths: list[str]) -> list[str | None]:
        return resolve_all(self.inner, paths)

    def _record(
        self,
        call: Call,
        started: float,
        result: BackendResult | None = None,
        refusal: Refusal | None = None,
        exc: BaseException | None = None,
    ) -> None:
        if self.audit is not None:
            record_call(self.audit, call, started, result, refusal, exc)

    def _one(
        self,
        call: Call | Refusal,
        operation: str,
        raw_path: str | None,
        result_type: type[R],
        invoke: Callable[[Call], R],
    ) -> R:
        """Guard, run and audit a single-target call."""
        started = time.monotonic()
        if isinstance(call, Refusal):  # the path itself was invalid
            result = _refused(result_type, raw_path, call)
            self._record(Call(operation, raw_path), started, result, refusal=call)
            return result
        judged: set[str] = set()
        refusal = self._admit(operation) or self._check(call, judged)
        if refusal is not None:
            result = _refused(result_type, call.path, refusal)
            self._record(call, started, result, refusal=refusal)
            return result
        try:
            with also_judged(self._reach_judge(call, judged)):
                result = invoke(call)
        except BaseException as exc:
            self._record(call, started, exc=exc)
            raise
        self._record(call, started, result)
        return result

    def _many(
        self,
        operation: str,
        calls: list[tuple[Call | Refusal, str]],
        result_type: type[R],
        invoke: Callable[[list[Call]], list[R]],
    ) -> list[R]:
        """Guard each target of a batch call; forward the admitted ones in one inner call.

        Results and audit records keep the caller's file order.
        """
        started = time.monotonic()
        admission = self._admit(operation) if calls else None
        judged: set[str] = set()
        results: dict[int, R] = {}
        refusals: dict[int, tuple[Call, Refusal]] = {}
        forward: list[tuple[int, Call]] = []
        for index, (call, raw_path) in enumerate(calls):
            if isinstance(call, Refusal):
                refusals[index] = (Call(operation, raw_path), call)
                results[index] = _refused(result_type, raw_path, call)
                continue
            refusal = admission or self._check(call, judged)
            if refusal is not None:
                refusals[index] = (call, refusal)
                results[index] = _refused(result_type, call.path, refusal)
            else:
                forward.append((index, call))
        failure: BaseException | None = None
        if forward:
            try:
                with also_judged(self._reach_judge(forward[0][1], judged)):
                    inner_results = invoke([call for _, call in forward])
                if len(inner_results) != len(forward):
                    raise RuntimeError(
                        f"{operation}: inner backend returned {len(inner_results)} results "
                        f"for {len(forward)} files"
                    )
                results.update(
                    (index, r) for (index, _), r in zip(forward, inner_results, strict=True)
                )
            except BaseException as exc:
                failure = exc
        forwarded = dict(forward)
        for index in range(len(calls)):
            if index in refusals:
                call, refusal = refusals[index]
                self._record(call, started, results[index], refusal=refusal)
            elif failure is not None:
                self._record(forwarded[index], started, exc=failure)
            else:
                self._record(forwarded[index], started, results[index])
        if failure is not None:
            raise failure
        return [results[index] for index in range(len(calls))]

    # -- the protocol --------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        call = _call("ls", path)
        return self._one(call, "ls", path, LsResult, lambda c: self.inner.ls(_p(c)))

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        call = _call("read", path)
        return self._one(
            call, "read", path, ReadResult, lambda c: self.inner.read(_p(c), offset, limit)
        )

    def write(self, path: str, content: str) -> WriteResult:
        call = _call("write", path, content=content)
        return self._one(
            call, "write", path, WriteResult, lambda c: self.inner.write(_p(c), content)
        )

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        call = _call("edit", path, old=old, new=new, replace_all=replace_all)
        return self._one(
            call, "edit", path, EditResult,
            lambda c: self.inner.edit(_p(c), old, new, replace_all),
        )  # fmt: skip

    def delete(self, path: str) -> DeleteResult:
        call = _call("delete", path)
        return self._one(call, "delete", path, DeleteResult, lambda c: self.inner.delete(_p(c)))

    def _search_root(self, path: str | None) -> str | None:
        """Where a search without a path runs: the inner backend's home (a host-path
        backend's ``root_dir``), so the rules and the audit see the root searched."""
        return getattr(self.inner, "glob_home", None) if path is None else path

    def glob(
        self, pattern: str, path: str | None = None, visible: Visible | None = None
    ) -> GlobResult:
        path = self._search_root(path) or "/"
        call = _call("glob", path)
        return self._one(
            call, "glob", path, GlobResult,
            lambda c: self.inner.glob(pattern, _p(c), visible=visible),
        )  # fmt: skip

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult:
        path = self._search_root(path)
        call = _call("grep", path)
        return self._one(
            call, "grep", path, GrepResult,
            # None stays None: "no root given" is the inner backend's to interpret.
            lambda c: self.inner.grep(
                literal, None if path is None else c.path, glob, max_count, visible=visible
            ),
        )  # fmt: skip

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        calls = [
            (_call("upload", path, data=bytes(data), content=decode_text(bytes(data))), path)
            for path, data in files
        ]
        return self._many(
            "upload",
            calls,
            FileUploadResult,
            lambda cs: self.inner.upload([(_p(c), c.data or b"") for c in cs]),
        )

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        calls = [(_call("download", path), path) for path in paths]
        return self._many(
            "download",
            calls,
            FileDownloadResult,
            lambda cs: self.inner.download([_p(c) for c in cs]),
        )

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        call = Call("execute", None, command=command)
        return self._one(
            call, "execute", None, ExecuteResult, lambda c: self.inner.execute(command, timeout)
        )

    # -- optional operations, forwarded under the same policies --

    def delete_tree(self, path: str) -> DeleteTree | None:
        """The inner backend's delete listing (a reviewer's preview), admitted as ``ls``.

        Raises ``PermissionError`` when a policy refuses it or the inner
        backend has no such listing (the preview then falls back or says why).
        """
        lister = getattr(self.inner, "delete_tree", None)
        refusal = self._admit("ls")
        if refusal is not None:
            raise PermissionError(refusal.message)
        if lister is None:
            raise NotImplementedError(f"{type(self.inner).__name__} has no delete listing")
        result: DeleteTree | None = lister(path)
        return result

    # -- the compiled view (kernel.execute_gate), forwarded under the same policies --

    @property
    def compiles_rules(self) -> bool:
        return view_executor(self.inner) is not None

    def execute_in_view(
        self, command: str, timeout: float | None, view: SandboxView
    ) -> ExecuteResult:
        """``execute`` in the inner backend's compiled view, judged as ``execute`` is."""
        run = forwarded_view_executor(self.inner)
        call = Call("execute", None, command=command)
        return self._one(
            call, "execute", None, ExecuteResult, lambda c: run(command, timeout, view)
        )


class _PolicyJudge:
    """A wrapper's policies judging the path its inner backend actually reached.

    The paths the policies already judged for the call keep their answer; any
    other (a link re-pointed meanwhile) is judged again with the call's
    operation. Listings are filtered by the policies' own result checks.
    """

    def __init__(self, backend: PolicyBackend, call: Call, judged: set[str]) -> None:
        self.backend = backend
        self.call = call
        self.judged = judged

    def refuses(self, op: ReachOp, local_path: str) -> bool:
        path = local_path.rstrip("/") or "/"
        if settled(op, path, self.judged):
            return False
        return self.backend._verdict(replace(self.call, path=path)) is not None

    def entry_visible(self, local_path: str) -> bool:
        return True


def _call(operation: str, path: str | None, **fields: Any) -> Call | Refusal:
    """The Call for a validated path, or the wrapper's own invalid-path refusal."""
    try:
        vpath = validate_path(path)
    except ValueError as exc:
        return Refusal(policy=None, rule="path", message=str(exc), code="invalid_path")
    return Call(operation, vpath, **fields)


def _p(call: Call) -> str:
    assert call.path is not None
    return call.path


_missing = [name for name in PROTOCOL_METHODS if name not in PolicyBackend.__dict__]
if _missing:  # pragma: no cover - a protocol change must be handled here first
    raise TypeError(f"PolicyBackend does not implement {_missing}")


# --------------------------------------------------------------------------- #
# Policies
