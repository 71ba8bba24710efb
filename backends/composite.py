"""CompositeBackend: real backends mounted at route prefixes of one virtual tree.

The routing itself (longest whole-component prefix, fan-out plans, merging)
is the pure :class:`~filegate.kernel.routing.Router`; this class only holds the
backends and runs the Router's plans synchronously.
"""

from __future__ import annotations

from collections.abc import Mapping

from filegate.kernel.execute_gate import SandboxView, forwarded_view_executor, view_executor
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.paths import validate_path
from filegate.kernel.protocol import (
    BackendProtocol,
    DeleteResult,
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
from filegate.kernel.routing import (
    RouteMatch,
    Router,
    SearchTarget,
    SingleResult,
    normalize_prefix,
)
from filegate.kernel.visibility import resolve_in_backend

MOUNT_POINT = "cannot delete: it is a mount point; delete files inside it"


class CompositeBackend(ReferenceNames):
    """A default backend plus backends mounted at route prefixes.

    Capabilities follow the default backend: ``execute`` always runs there
    (the shell only sees the default's files), and ``can_delete`` is the
    default's. A route whose backend cannot delete answers ``delete`` with its
    own ``unsupported`` error value, so advertising ``delete`` never lets a
    call through to a backend that lacks it. Deleting a mount point, or a
    directory that contains one, is refused: a recursive delete must not fan
    out into other stores implicitly.
    """

    def __init__(self, default: BackendProtocol, routes: Mapping[str, BackendProtocol]) -> None:
        self.default = default
        self.router = Router(routes)
        self.routes: dict[str, BackendProtocol] = {
            normalize_prefix(prefix): backend for prefix, backend in routes.items()
        }

    @property
    def can_execute(self) -> bool:
        return self.default.can_execute

    @property
    def can_delete(self) -> bool:
        return self.default.can_delete

    def backend_for(self, prefix: str | None) -> BackendProtocol:
        """The backend serving route ``prefix`` (None = default)."""
        if prefix is None:
            return self.default
        backend = self.routes.get(prefix)  # the Router hands out canonical prefixes
        return backend if backend is not None else self.routes[normalize_prefix(prefix)]

    def _single(self, result: SingleResult, match: RouteMatch, virtual: str) -> SingleResult:
        """A single-path result, renamed to the caller's virtual path (error_path too)."""
        return self.router.virtual_error(result, match.prefix).model_copy(update={"path": virtual})

    # -- single-path operations --------------------------------------------

    def ls(self, path: str) -> LsResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return LsResult(error=str(exc), code="invalid_path")
        match = self.router.resolve(virtual)
        result = self.backend_for(match.prefix).ls(match.local_path)
        return self.router.merge_ls(virtual, match.prefix, result)

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return ReadResult(path=str(path), error=str(exc), code="invalid_path")
        match = self.router.resolve(virtual)
        result = self.backend_for(match.prefix).read(match.local_path, offset, limit)
        return self._single(result, match, virtual)

    def write(self, path: str, content: str) -> WriteResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return WriteResult(path=str(path), error=str(exc), code="invalid_path")
        match = self.router.resolve(virtual)
        result = self.backend_for(match.prefix).write(match.local_path, content)
        return self._single(result, match, virtual)

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return EditResult(path=str(path), error=str(exc), code="invalid_path")
        match = self.router.resolve(virtual)
        result = self.backend_for(match.prefix).edit(match.local_path, old, new, replace_all)
        return self._single(result, match, virtual)

    def delete(self, path: str) -> DeleteResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return DeleteResult(path=str(path), error=str(exc), code="invalid_path")
        match = self.router.resolve(virtual)
        if match.prefix is not None and match.local_path == "/":
            return DeleteResult(
                path=virtual,
                error=MOUNT_POINT,
                code="invalid_argument",
                error_path=virtual,
            )
        mounts = self.router.prefixes_under(virtual)
        if mounts:
            return DeleteResult(
                path=virtual,
                error=(
                    f"cannot delete: it contains the mount point(s) {', '.join(mounts)}; "
                    "delete files inside them one by one"
                ),
                code="invalid_argument",
                error_path=virtual,
            )
        result = self.backend_for(match.prefix).delete(match.local_path)
        return self._single(result, match, virtual)

    # -- fan-out searches ----------------------------------------------------

    def glob(self, pattern: str, path: str = "/", visible: Visible | None = None) -> GlobResult:
        try:
            validate_path(path)
        except ValueError as exc:
            return GlobResult(error=str(exc), code="invalid_path")
        try:
            plan = self.router.glob_plan(pattern, path)
        except ValueError as exc:
            return GlobResult(error=str(exc), code="invalid_path")
        parts: list[tuple[SearchTarget, GlobResult]] = []
        for target in plan.targets:
            assert target.pattern is not None  # glob plans always carry a pattern
            backend = self.backend_for(target.prefix)
            local_visible = self._local_visible(target.prefix, visible)
            parts.append(
                (target, backend.glob(target.pattern, target.local_path, visible=local_visible))
            )
        return self.router.merge_glob(plan, parts)

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult:
        try:
            validate_path(path)
        except ValueError as exc:
            return GrepResult(error=str(exc), code="invalid_path")
        try:
            plan = self.router.grep_plan(path, glob)
        except ValueError as exc:
            return GrepResult(error=str(exc), code="invalid_path")
        parts = [
            (
                target,
                self.backend_for(target.prefix).grep(
                    literal,
                    target.local_path,
                    target.pattern,
                    max_count,
                    visible=self._local_visible(target.prefix, visible),
                ),
            )
            for target in plan.targets
        ]
        return self.router.merge_grep(plan, parts, max_count)

    def _local_visible(self, prefix: str | None, visible: Visible | None) -> Visible | None:
        """``visible`` (over this composite's paths) for one route's backend-local paths."""
        if visible is None or prefix is None:
            return visible
        return lambda local: visible(self.router.to_virtual(prefix, local))

    def resolve_path(self, path: str) -> str | None:
        """The in-root target of ``path`` on the backend that serves it (kernel.visibility).

        A target is only followed inside its own backend: a symlink cannot cross
        into another route.
        """
        try:
            match = self.router.resolve(path)
        except ValueError:
            return None
        resolved = resolve_in_backend(self.backend_for(match.prefix), match.local_path)
        if resolved is None:
            return None
        return self.router.to_virtual(match.prefix, resolved)

    def resolve_paths(self, paths: list[str]) -> list[str | None]:
        return [self.resolve_path(path) for path in paths]

    # -- batches -------------------------------------------------------------

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        """One result per file, in input order; each route gets one batch call."""
        results: list[FileUploadResult | None] = [None] * len(files)
        batches: dict[str | None, list[tuple[int, RouteMatch, str, bytes]]] = {}
        for index, (path, data) in enumerate(files):
            try:
                virtual = validate_path(path)
            except ValueError as exc:
                results[index] = FileUploadResult(
                    path=str(path), error=str(exc), code="invalid_path"
                )
                continue
            match = self.router.resolve(virtual)
            batches.setdefault(match.prefix, []).append((index, match, virtual, data))
        for prefix, batch in batches.items():
            answers = self.backend_for(prefix).upload([(m.local_path, d) for _, m, _, d in batch])
            for (index, match, shown, _), answer in zip(batch, answers, strict=True):
                results[index] = self._single(answer, match, shown)
        return [r for r in results if r is not None]

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        """One result per path, in input order; each route gets one batch call."""
        results: list[FileDownloadResult | None] = [None] * len(paths)
        batches: dict[str | None, list[tuple[int, RouteMatch, str]]] = {}
        for index, path in enumerate(paths):
            try:
                virtual = validate_path(path)
            except ValueError as exc:
                results[index] = FileDownloadResult(
                    path=str(path), error=str(exc), code="invalid_path"
                )
                continue
            match = self.router.resolve(virtual)
            batches.setdefault(match.prefix, []).append((index, match, virtual))
        for prefix, batch in batches.items():
            answers = self.backend_for(prefix).download([m.local_path for _, m, _ in batch])
            for (index, match, shown), answer in zip(batch, answers, strict=True):
                results[index] = self._single(answer, match, shown)
        return [r for r in results if r is not None]

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        """Always the default backend: that is where the shell and its files are."""
        return self.default.execute(command, timeout)

    @property
    def compiles_rules(self) -> bool:
        """Whether ``execute`` (always the default's) runs in a compiled view."""
        return view_executor(self.default) is not None

    def execute_in_view(
        self, command: str, timeout: float | None, view: SandboxView
    ) -> ExecuteResult:
        return forwarded_view_executor(self.default)(command, timeout, view)
