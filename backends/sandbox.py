"""A backend whose file operations all run *inside* an isolated sandbox.

Subclasses provide one primitive, :meth:`BaseSandbox.run_in_sandbox` (run a
shell command in the sandbox, cwd = the workspace, capped output); the ten
protocol operations are built on it. ``execute`` is that primitive with the
user-facing output cap; file operations use the same primitive with a cap big
enough for whole files, because a 100 000-byte cap would make downloads of
larger files impossible.

Nothing the caller supplies is ever interpolated into shell text: each file
operation runs a fixed Python helper (``python3 -I -S -c <constant script>``)
whose parameters travel as one base64-encoded ``marshal`` argument (upload
bytes as a second base64 argument), and whose reply is a single ASCII line of
JSON after a marker, every string and byte string in it base64-encoded. The
helper imports only built-in modules: interpreter start-up is most of the cost
of an operation.
The helper resolves every path below the workspace and refuses anything that
lands outside it (a symlink pointing out) even though the host filesystem is
not mounted in the sandbox: the semantics match :class:`FilesystemBackend`.

Line splitting, read windows, exact edits and binary detection are the shared
host-side helpers of :mod:`backends.textops`; only the per-line grep scan runs
in the helper (so a search ships matches, not whole files).
"""

from __future__ import annotations

import base64
import errno
import json
import marshal
import shlex
from abc import ABC, abstractmethod
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, TypeVar

from filegate.backends.filesystem import (
    DEFAULT_MAX_FILE_BYTES,
    MAX_GLOB_RESULTS,
    NotRegularFileError,
    PathEscapeError,
    call_token,
    error_value,
)
from filegate.kernel.batch import RaisingOps
from filegate.kernel.globbing import GlobMatcher, grep_scope, resolve_glob, spells_dot
from filegate.kernel.paths import join_path, validate_path
from filegate.kernel.protocol import (
    DEFAULT_READ_LIMIT,
    DeleteResult,
    EditResult,
    ExecuteResult,
    FileDownloadResult,
    FileInfo,
    FileUploadResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
    _Result,
)
from filegate.kernel.textops import (
    bad_limit,
    decode_text,
    is_media_path,
    merge_grep_budget,
    read_window,
)

WORKSPACE = "/workspace"
"""Where the backend's root directory appears inside the sandbox."""
DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_OUTPUT_BYTES = 100_000
DEFAULT_OP_TIMEOUT = 60.0
UPLOAD_CHUNK_BYTES = 72 * 1024
"""Raw bytes per upload call: base64 + helper must stay under Linux's 128 KiB per-argument limit."""
_MARK = "@@filegate-reply@@ "

R = TypeVar("R", bound=_Result)

# The helper run inside the sandbox. Constant text (never formatted with caller
# data); argv: workspace, operation, base64(marshal(parameters)) [, base64(upload bytes)].
_HELPER = r"""
import binascii, errno, marshal, os, stat, sys
W, OP, P = sys.argv[1], sys.argv[2], marshal.loads(binascii.a2b_base64(sys.argv[3]))
DATA = binascii.a2b_base64(sys.argv[4]) if len(sys.argv) > 4 else b""
class Escape(Exception): pass
class NotRegular(Exception): pass
def inside(r): return r == W or r.startswith(W + "/")
def real(v, follow=True):
    p = W + v if v != "/" else W
    if follow:
        r = os.path.realpath(p)
    else:
        h, t = os.path.split(p)
        r = os.path.join(os.path.realpath(h), t) if t else os.path.realpath(h)
    if not inside(r): raise Escape()
    return r
def utf8(n):
    try:
        n.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
def b64(b): return binascii.b2a_base64(b, newline=False).decode("ascii")
def dump(o):
    if o is None: return "null"
    if o is True: return "true"
    if o is False: return "false"
    if isinstance(o, (int, float)): return repr(o)
    if isinstance(o, str): o = o.encode("utf-8", "surrogatepass")
    if isinstance(o, bytes): return '"' + b64(o) + '"'
    if isinstance(o, list): return "[" + ",".join(dump(v) for v in o) + "]"
    return "{" + ",".join('"%s":%s' % (k, dump(v)) for k, v in o.items()) + "}"
def read_file(r, cap):
    fd = os.open(r, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode): raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(st.st_mode): raise NotRegular()
        if st.st_size > cap: raise OSError(errno.EFBIG, "file too large: %d bytes" % st.st_size)
        parts, n = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b: break
            parts.append(b)
            n += len(b)
            if n > cap: raise OSError(errno.EFBIG, "file too large")
        return b"".join(parts)
    finally:
        os.close(fd)
def walk(top, hidden):
    stack, out = [(top, "")], []
    while stack:
        d, prefix = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            n = e.name
            if not utf8(n) or (not hidden and n.startswith(".")): continue
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, prefix + n + "/"))
                elif e.is_file(follow_symlinks=False):
                    out.append((e.path, prefix + n))
            except OSError:
                pass
    return out
def need_dir(r):
    if not stat.S_ISDIR(os.stat(r).st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory")
def op_ls(p):
    r = real(p["path"])
    need_dir(r)
    rows = []
    with os.scandir(r) as it:
        for e in it:
            if not utf8(e.name): continue
            try:
                if e.is_symlink():
                    t = os.path.realpath(e.path)
                    if not inside(t): continue
                    s = os.stat(t)
                else:
                    s = e.stat(follow_symlinks=False)
            except OSError:
                continue
            isdir = stat.S_ISDIR(s.st_mode)
            if isdir or stat.S_ISREG(s.st_mode):
                rows.append([e.name, isdir, s.st_size, s.st_mtime])
    return {"entries": rows}
def op_get(p):
    return {"data": read_file(real(p["path"]), p["max"])}
def op_put(p):
    r = real(p["path"])
    if r == W: raise IsADirectoryError(errno.EISDIR, "is a directory")
    d, name = os.path.split(r)
    tmp = p["tmp"]
    if tmp is None:
        try:
            os.makedirs(d, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory")
        try:
            old = os.lstat(r)
        except FileNotFoundError:
            old = None
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if old is not None and not stat.S_ISREG(old.st_mode): raise NotRegular()
        token = p.get("token")
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        if token is None or not str(token).isalnum():
            token, flags = os.urandom(6).hex(), flags | os.O_EXCL
        else:
            flags |= os.O_TRUNC
        tmp = ".%s.%s.filegate-tmp" % (name[:40], token)
    else:
        if "/" in tmp or not tmp.endswith(".filegate-tmp"):
            raise OSError(errno.EINVAL, "bad staging name")
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    staged = os.path.join(d, tmp)
    fd = os.open(staged, flags, 0o666)
    try:
        data = memoryview(DATA)
        while data:
            data = data[os.write(fd, data):]
    except BaseException:
        os.close(fd)
        os.unlink(staged)
        raise
    os.close(fd)
    if not p["final"]: return {"tmp": tmp}
    try:
        os.chmod(staged, stat.S_IMODE(os.stat(r).st_mode))
    except FileNotFoundError:
        pass
    os.replace(staged, r)
    return {}
def op_abort(p):
    d = os.path.dirname(real(p["path"]))
    tmp = p["tmp"]
    if "/" not in tmp and tmp.endswith(".filegate-tmp"):
        try:
            os.unlink(os.path.join(d, tmp))
        except OSError:
            pass
    return {}
def op_rm(p):
    r = real(p["path"], follow=False)
    if r == W: raise OSError(errno.EINVAL, "refusing to delete the root")
    if stat.S_ISDIR(os.lstat(r).st_mode):
        import shutil
        shutil.rmtree(r)
    else:
        os.unlink(r)
    return {}
def op_walk(p):
    r = real(p["path"])
    need_dir(r)
    return {"files": [rel for _, rel in walk(r, p["hidden"])]}
def scan(data, needle, text_needle, limit):
    if needle not in data: return None if b"\0" in data else []
    if b"\0" in data: return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")
    if text.endswith("\n"): lines.pop()
    hits = []
    for i, line in enumerate(lines, 1):
        if text_needle in line:
            hits.append([i, line[:-1] if line.endswith("\r") else line])
            if limit is not None and len(hits) >= limit: break
    return hits
def op_grep(p):
    text_needle = p["needle"]
    needle = text_needle.encode("utf-8")
    r = real(p["path"])
    if stat.S_ISREG(os.stat(r).st_mode):
        hits = scan(read_file(r, p["max"]), needle, text_needle, p["limit"])
        return {"binary": True} if hits is None else {"files": [["", hits]]}
    need_dir(r)
    found = []
    for path, rel in walk(r, p["hidden"]):
        try:
            hits = scan(read_file(path, p["max"]), needle, text_needle, p["limit"])
        except (OSError, NotRegular):
            continue
        if hits: found.append([rel, hits])
    return {"files": found}
try:
    reply = globals()["op_" + OP](P)
except Escape:
    reply = {"err": "escape"}
except NotRegular:
    reply = {"err": "notreg"}
except OSError as exc:
    reply = {"err": "os", "errno": exc.errno or errno.EIO, "msg": exc.strerror or str(exc)}
except RecursionError:
    reply = {"err": "os", "errno": errno.ELOOP, "msg": "too deep"}
sys.stdout.write("@@filegate-reply@@ " + dump(reply) + "\n")
"""


def _bytes(value: str) -> bytes:
    """A byte string from the helper's reply (every string there is base64)."""
    return base64.b64decode(value, validate=True)


def _text(value: str) -> str:
    return _bytes(value).decode("utf-8", "surrogatepass")


class SandboxOpError(Exception):
    """The sandbox could not run a file operation (start failure, timeout, helper crash)."""

    def __init__(self, message: str, code: str = "io_error") -> None:
        super().__init__(message)
        self.code = code


def _fail(result_type: type[R], vpath: str, exc: BaseException) -> R:
    """Error value for ``exc``: sandbox failures keep their message, the rest as on disk."""
    if isinstance(exc, SandboxOpError):
        result = result_type(error=f"{vpath}: {exc}", code=exc.code)  # type: ignore[arg-type]
        if "path" in result_type.model_fields:
            result.path = vpath  # type: ignore[attr-defined]
        return result
    return error_value(result_type, vpath, exc)


_EXPECTED = (OSError, ValueError, PathEscapeError, NotRegularFileError, SandboxOpError)


class BaseSandbox(ABC):
    """File operations through a sandboxed command runner (contract §1 "Sandbox").

    Virtual ``/x`` is ``/workspace/x`` inside the sandbox.
    """

    workspace: str = WORKSPACE

    def __init__(
        self,
        *,
        default_timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        op_timeout: float = DEFAULT_OP_TIMEOUT,
    ) -> None:
        self.default_timeout = default_timeout
        self.max_output_bytes = max_output_bytes
        self.max_file_bytes = max_file_bytes
        self.op_timeout = op_timeout
        # Whole files travel base64-encoded: 4/3 of the file plus JSON/stderr slack.
        self._reply_cap = max_file_bytes * 4 // 3 + (1 << 20)
        self._ops = RaisingOps(self._get, self._put, _fail, _EXPECTED)

    # -- the primitive -------------------------------------------------------

    @abstractmethod
    def run_in_sandbox(self, command: str, timeout: float, max_output_bytes: int) -> ExecuteResult:
        """Run shell ``command`` inside the sandbox (cwd = workspace, clean env)."""

    @property
    def can_execute(self) -> bool:
        return True

    @property
    def can_delete(self) -> bool:
        return True

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        limit = self.default_timeout if timeout is None else timeout
        if limit <= 0:
            return ExecuteResult(
                error=f"timeout must be positive, got {timeout}", code="invalid_argument"
            )
        return self.run_in_sandbox(command, limit, self.max_output_bytes)

    # -- helper plumbing -----------------------------------------------------

    def _call(self, op: str, data: bytes | None = None, **params: Any) -> dict[str, Any]:
        """Run helper operation ``op``; return its reply or raise the matching error.

        ``data`` (upload bytes) travels as its own base64 argument, not inside the
        JSON, so it is encoded once and a chunk stays under the argument limit.
        """
        args = [_HELPER, self.workspace, op]
        args.append(base64.b64encode(marshal.dumps(params)).decode("ascii"))
        if data is not None:
            args.append(base64.b64encode(data).decode("ascii"))
        command = "exec python3 -I -S -c " + " ".join(shlex.quote(arg) for arg in args)
        result = self.run_in_sandbox(command, self.op_timeout, self._reply_cap)
        if result.code == "timeout":
            raise SandboxOpError(
                f"sandbox operation timed out after {self.op_timeout:g} s", "timeout"
            )
        if result.truncated:
            raise SandboxOpError(
                f"the answer is over {self._reply_cap} bytes: narrow the request", "too_large"
            )
        reply: dict[str, Any] | None = None
        for line in result.output.splitlines():
            if line.startswith(_MARK):
                try:
                    reply = json.loads(line[len(_MARK) :])
                except json.JSONDecodeError as exc:
                    raise SandboxOpError(f"unreadable sandbox reply: {exc}") from exc
                break
        if reply is None:
            detail = (result.error or result.output or f"exit code {result.exit_code}").strip()
            raise SandboxOpError(f"sandbox operation failed: {detail[-500:]}")
        kind = _text(reply["err"]) if "err" in reply else None
        if kind == "escape":
            raise PathEscapeError(params.get("path", "?"))
        if kind == "notreg":
            raise NotRegularFileError(params.get("path", "?"))
        if kind == "os":
            raise OSError(int(reply["errno"]), _text(reply["msg"]))
        return reply

    def _get(self, vpath: str) -> bytes:
        return _bytes(self._call("get", path=vpath, max=self.max_file_bytes)["data"])

    def _put(self, vpath: str, data: bytes) -> None:
        """Write ``data`` atomically, in argument-sized chunks (staging file + rename).

        The staging file is named after the journaled call, as on the Filesystem
        backend (:func:`backends.filesystem.named_for_call`)."""
        tmp: str | None = None
        pos = 0
        try:
            while True:
                chunk = data[pos : pos + UPLOAD_CHUNK_BYTES]
                pos += len(chunk)
                final = pos >= len(data)
                reply = self._call(
                    "put", chunk, path=vpath, tmp=tmp, final=final, token=call_token()
                )
                if final:
                    return
                tmp = _text(reply["tmp"])
        except BaseException:
            if tmp is not None:
                with suppress(*_EXPECTED):
                    self._call("abort", path=vpath, tmp=tmp)
            raise

    # -- protocol ------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            rows = self._call("ls", path=vpath)["entries"]
        except _EXPECTED as exc:
            return _fail(LsResult, vpath, exc)
        entries = [
            FileInfo(
                path=join_path(vpath, _text(name)) + ("/" if is_dir else ""),
                is_dir=is_dir,
                size=None if is_dir else size,
                modified_at=datetime.fromtimestamp(mtime, UTC).isoformat(),
            )
            for name, is_dir, size, mtime in rows
        ]
        entries.sort(key=lambda e: e.path)
        return LsResult(entries=entries)

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            if limit <= 0:
                return bad_limit(vpath, limit)
            data = self._get(vpath)
        except _EXPECTED as exc:
            result = _fail(ReadResult, vpath, exc)
            if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
                result.error = f"{vpath} is over the {self.max_file_bytes}-byte limit"
            return result
        if not is_media_path(vpath):
            text = decode_text(data)
            if text is not None:
                return read_window(vpath, text, offset, limit)
        return ReadResult(path=vpath, data=data, encoding="base64", size=len(data))

    def write(self, path: str, content: str) -> WriteResult:
        return self._ops.write(path, content)

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        return self._ops.edit(path, old, new, replace_all)

    def delete(self, path: str) -> DeleteResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            if vpath == "/":
                return DeleteResult(
                    path=vpath, error="refusing to delete the root", code="invalid_argument"
                )
            self._call("rm", path=vpath)
        except _EXPECTED as exc:
            return _fail(DeleteResult, vpath, exc)
        return DeleteResult(path=vpath)

    def glob(self, pattern: str, path: str = "/") -> GlobResult:
        vroot = str(path)
        try:
            vroot, rel_pattern = resolve_glob(pattern, path)
            matcher = GlobMatcher(rel_pattern)
            files = self._call("walk", path=vroot, hidden=spells_dot(pattern))["files"]
        except _EXPECTED as exc:
            return _fail(GlobResult, vroot, exc)
        base = vroot.rstrip("/") + "/"
        rels = [_text(rel) for rel in files]
        matches = sorted(base + rel for rel in rels if matcher.match(rel))
        truncated = len(matches) > MAX_GLOB_RESULTS
        return GlobResult(matches=matches[:MAX_GLOB_RESULTS], truncated=truncated)

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
    ) -> GrepResult:
        vroot = str(path)
        try:
            scope = grep_scope(literal, path, glob, max_count)
            if isinstance(scope, GrepResult):
                return scope
            vroot, flt = scope
            reply = self._call(
                "grep",
                path=vroot,
                needle=literal,
                hidden=bool(glob) and spells_dot(glob or ""),
                limit=None if max_count is None else max_count + 1,
                max=self.max_file_bytes,
            )
        except _EXPECTED as exc:
            return _fail(GrepResult, vroot, exc)
        if reply.get("binary"):
            return GrepResult(error=f"{vroot} is a binary file: cannot grep", code="binary_file")
        base = vroot.rstrip("/") + "/"
        found: list[GrepMatch] = []
        for encoded_rel, hits in reply["files"]:
            rel = _text(encoded_rel)
            vpath = vroot if rel == "" else base + rel
            if rel and not flt.wants(vpath):
                continue
            found.extend(
                GrepMatch.model_construct(path=vpath, line=line, text=_text(text))
                for line, text in hits
            )
        kept, truncated = merge_grep_budget(found, max_count)
        return GrepResult(matches=kept, truncated=truncated)

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        return self._ops.upload(files)

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        return self._ops.download(paths)


__all__ = ["WORKSPACE", "BaseSandbox", "SandboxOpError"]
