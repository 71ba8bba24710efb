# The helper every sandbox file operation runs, inside the sandbox, as
# ``python3 -I -S -c <this file's text>`` (see filegate.backends.sandbox_helper).
# It is a real file so it is read, linted and diffed like code; it is never
# imported (it acts on sys.argv at once). Only built-in modules: interpreter
# start-up is most of an operation's cost.
# argv: workspace, operation, base64(marshal(parameters)) [, base64(upload bytes)].
import binascii
import errno
import marshal
import os
import stat
import sys

W, OP, P = sys.argv[1], sys.argv[2], marshal.loads(binascii.a2b_base64(sys.argv[3]))
DATA = binascii.a2b_base64(sys.argv[4]) if len(sys.argv) > 4 else b""


class Escape(Exception):
    pass


class NotRegular(Exception):
    pass


def inside(r):
    return r == W or r.startswith(W + "/")


def real(v, follow=True):
    p = W + v if v != "/" else W
    if follow:
        r = os.path.realpath(p)
    else:
        h, t = os.path.split(p)
        r = os.path.join(os.path.realpath(h), t) if t else os.path.realpath(h)
    if not inside(r):
        raise Escape()
    return r


def utf8(n):
    try:
        n.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def b64(b):
    return binascii.b2a_base64(b, newline=False).decode("ascii")


def dump(o):
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, (int, float)):
        return repr(o)
    if isinstance(o, str):
        o = o.encode("utf-8", "surrogatepass")
    if isinstance(o, bytes):
        return '"' + b64(o) + '"'
    if isinstance(o, list):
        return "[" + ",".join(dump(v) for v in o) + "]"
    return "{" + ",".join('"%s":%s' % (k, dump(v)) for k, v in o.items()) + "}"


def read_file(r, cap):
    fd = os.open(r, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular()
        if st.st_size > cap:
            raise OSError(errno.EFBIG, "file too large: %d bytes" % st.st_size)
        parts, n = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            parts.append(b)
            n += len(b)
            if n > cap:
                raise OSError(errno.EFBIG, "file too large")
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
            if not utf8(n) or (not hidden and n.startswith(".")):
                continue
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
            if not utf8(e.name):
                continue
            try:
                if e.is_symlink():
                    t = os.path.realpath(e.path)
                    if not inside(t):
                        continue
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
    if r == W:
        raise IsADirectoryError(errno.EISDIR, "is a directory")
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
        if old is not None and not stat.S_ISREG(old.st_mode):
            raise NotRegular()
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
            data = data[os.write(fd, data) :]
    except BaseException:
        os.close(fd)
        os.unlink(staged)
        raise
    os.close(fd)
    if not p["final"]:
        return {"tmp": tmp}
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
    if r == W:
        raise OSError(errno.EINVAL, "refusing to delete the root")
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
    if needle not in data:
        return None if b"\0" in data else []
    if b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    hits = []
    for i, line in enumerate(lines, 1):
        if text_needle in line:
            hits.append([i, line[:-1] if line.endswith("\r") else line])
            if limit is not None and len(hits) >= limit:
                break
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
        if hits:
            found.append([rel, hits])
    return {"files": found}


def op_grepfiles(p):
    text_needle = p["needle"]
    needle = text_needle.encode("utf-8")
    r = real(p["path"])
    need_dir(r)
    found = []
    for rel in p["files"]:
        parts = rel.split("/")
        if "" in parts or "." in parts or ".." in parts:
            continue
        path, ok = r, True
        for part in parts[:-1]:
            path = os.path.join(path, part)
            if os.path.islink(path) or not os.path.isdir(path):
                ok = False
                break
        if not ok:
            continue
        try:
            data = read_file(os.path.join(path, parts[-1]), p["max"])
            hits = scan(data, needle, text_needle, p["limit"])
        except (OSError, NotRegular):
            continue
        if hits:
            found.append([rel, hits])
    return {"files": found}


def op_resolve(p):
    out = []
    for v in p["paths"]:
        try:
            r = real(v)
        except Escape:
            out.append(None)
            continue
        out.append("/" if r == W else r[len(W) :])
    return {"paths": out}


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
