"""Policy wrappers over real backends on tmp dirs (backends/policy/, backends/audit.py)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from filegate.backends import FilesystemBackend, LocalShellBackend
from filegate.backends.audit import FileAuditSink, audit_context, current_audit_context
from filegate.backends.policy import (
    BUILTIN_SECRET_RULES,
    POLICY_KINDS,
    Call,
    DenyOperationsPolicy,
    DenyWritePolicy,
    Policy,
    PolicyBackend,
    PolicyConfig,
    RateLimitPolicy,
    Refusal,
    SecretScanPolicy,
    TokenBucket,
    build_policy_chain,
)
from filegate.kernel.protocol import PROTOCOL_METHODS, BackendProtocol

# Secret-shaped strings built at runtime so the test source itself holds none.
AWS_KEY = "AKIA" + "Q3EXAMPLE7KEY2ID"
GITHUB_TOKEN = "ghp" + "_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PEM_HEADER = "-----BEGIN " + "RSA PRIVATE KEY-----"
API_KEY_LINE = "api_key = '" + "sk_live_0123456789abcdef" + "'"


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #


class CountingPolicy(Policy):
    """A real policy that allows everything and remembers what it was asked."""

    def __init__(self) -> None:
        super().__init__("counting")
        self.admitted: list[str] = []
        self.checked: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()

    def admit(self, operation: str) -> Refusal | None:
        with self._lock:
            self.admitted.append(operation)
        return None

    def check(self, call: Call, inner: BackendProtocol) -> Refusal | None:
        with self._lock:
            self.checked.append((call.operation, call.path))
        return None


class FakeClock:
    """Deterministic time: ``sleep`` advances ``now`` and is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _seed(root: Path) -> None:
    (root / "docs").mkdir(parents=True, exist_ok=True)
    (root / "docs" / "a.txt").write_text("alpha\nneedle here\n")
    (root / "gone.txt").write_text("to delete\n")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02")


def _protocol_members() -> set[str]:
    """Public members of BackendProtocol, found by introspection (not by the list)."""
    return {name for name in vars(BackendProtocol) if not name.startswith("_")}


# --------------------------------------------------------------------------- #
# (1) every protocol member is handled by the wrapper
# --------------------------------------------------------------------------- #

Case = Callable[[BackendProtocol, Path, bool], None]


def _ls(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    result = b.ls("/docs")
    if forwarded:
        assert [e.path for e in result.entries] == ["/docs/a.txt"]
    else:
        assert result.code == "permission_denied" and result.entries == []


def _read(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    result = b.read("/docs/a.txt", 1, 1)
    if forwarded:
        assert result.lines == ["needle here"] and result.total_lines == 2
    else:
        assert result.code == "permission_denied" and result.lines == []


def _write(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    result = b.write("/new/w.txt", "written")
    if forwarded:
        assert result.ok and (root / "new" / "w.txt").read_text() == "written"
    else:
        assert result.code == "permission_denied" and not (root / "new").exists()


def _edit(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    result = b.edit("/docs/a.txt", "alpha", "omega")
    text = (root / "docs" / "a.txt").read_text()
    if forwarded:
        assert result.occurrences == 1 and text.startswith("omega")
    else:
        assert result.code == "permission_denied" and text.startswith("alpha")


def _delete(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    result = b.delete("/gone.txt")
    assert (root / "gone.txt").exists() is not forwarded
    assert result.ok is forwarded


def _glob(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    result = b.glob("*.txt", "/")
    if forwarded:
        assert result.matches == ["/docs/a.txt", "/gone.txt"]
    else:
        assert result.code == "permission_denied" and result.matches == []


def _grep(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    result = b.grep("needle", "/docs", None, None)
    if forwarded:
        assert [(m.path, m.line) for m in result.matches] == [("/docs/a.txt", 2)]
    else:
        assert result.code == "permission_denied" and result.matches == []


def _upload(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    results = b.upload([("/up/x.bin", b"\xff\x00x"), ("/up/y.txt", b"y")])
    assert [r.path for r in results] == ["/up/x.bin", "/up/y.txt"]
    if forwarded:
        assert all(r.ok for r in results)
        assert (root / "up" / "x.bin").read_bytes() == b"\xff\x00x"
    else:
        assert {r.code for r in results} == {"permission_denied"}
        assert not (root / "up").exists()


def _download(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    results = b.download(["/blob.bin", "/docs/a.txt"])
    if forwarded:
        assert [r.content for r in results] == [b"\x00\x01\x02", b"alpha\nneedle here\n"]
    else:
        assert [r.code for r in results] == ["permission_denied"] * 2
        assert all(r.content is None for r in results)


def _execute(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    result = b.execute("echo ran > ran.txt && echo done", 30)
    if forwarded:
        assert result.exit_code == 0 and "done" in result.output
        assert (root / "ran.txt").read_text() == "ran\n"
    else:
        assert result.code == "permission_denied" and not (root / "ran.txt").exists()


def _can_execute(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    assert b.can_execute is forwarded  # the shell backend can execute


def _can_delete(b: BackendProtocol, root: Path, forwarded: bool) -> None:
    assert b.can_delete is forwarded


CASES: dict[str, Case] = {
    "ls": _ls,
    "read": _read,
    "write": _write,
    "edit": _edit,
    "delete": _delete,
    "glob": _glob,
    "grep": _grep,
    "upload": _upload,
    "download": _download,
    "execute": _execute,
    "can_execute": _can_execute,
    "can_delete": _can_delete,
}


def test_cases_cover_the_whole_protocol() -> None:
    members = _protocol_members()
    assert set(PROTOCOL_METHODS) <= members
    # Adding a member to BackendProtocol without a case here (and in the
    # wrapper) fails this test.
    assert members == set(CASES), f"unhandled protocol members: {members ^ set(CASES)}"
    for name in members:
        assert name in vars(PolicyBackend), f"PolicyBackend does not define {name}"
    assert not hasattr(PolicyBackend, "__getattr__"), "no passthrough of non-protocol attributes"


@pytest.mark.parametrize("member", sorted(_protocol_members()))
def test_every_member_is_forwarded(tmp_path: Path, member: str) -> None:
    _seed(tmp_path)
    counting = CountingPolicy()
    wrapped = PolicyBackend(LocalShellBackend(tmp_path), [counting])
    CASES[member](wrapped, tmp_path, True)
    if member in PROTOCOL_METHODS:
        assert counting.admitted == [member], "the call went through the guard"


@pytest.mark.parametrize("member", sorted(_protocol_members()))
def test_every_member_can_be_refused(tmp_path: Path, member: str) -> None:
    _seed(tmp_path)
    ban = DenyOperationsPolicy("ban-all", PROTOCOL_METHODS)
    wrapped = PolicyBackend(LocalShellBackend(tmp_path), [ban])
    CASES[member](wrapped, tmp_path, False)


def test_capabilities_follow_the_inner_backend(tmp_path: Path) -> None:
    plain = PolicyBackend(FilesystemBackend(tmp_path), [CountingPolicy()])
    assert plain.can_execute is False and plain.can_delete is True
    no_delete = PolicyBackend(LocalShellBackend(tmp_path), [DenyOperationsPolicy("d", ["delete"])])
    assert no_delete.can_execute is True and no_delete.can_delete is False
    assert isinstance(plain, BackendProtocol)


def test_inner_gets_the_normalised_path(tmp_path: Path) -> None:
    counting = CountingPolicy()
    wrapped = PolicyBackend(FilesystemBackend(tmp_path), [counting])
    assert wrapped.write("//d/./x.txt", "x").path == "/d/x.txt"
    assert counting.checked == [("write", "/d/x.txt")]
    bad = wrapped.write("/d/../../etc/passwd", "x")
    assert bad.code == "invalid_path" and counting.checked == [("write", "/d/x.txt")]


# --------------------------------------------------------------------------- #
# (2) deny prefixes and globs for writes
# --------------------------------------------------------------------------- #


@pytest.fixture
def guarded(tmp_path: Path) -> tuple[PolicyBackend, Path]:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "conf").write_text("setting = 1\n")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id.pem").write_text("pem\n")
    (tmp_path / "notes.txt").write_text("notes\n")
    policy = DenyWritePolicy("protect", prefixes=["/etc/"], globs=["/**/*.pem"])
    return PolicyBackend(FilesystemBackend(tmp_path), [policy]), tmp_path


def test_prefix_deny_write_edit_delete(guarded: tuple[PolicyBackend, Path]) -> None:
    backend, root = guarded
    for path in ("/etc/new", "/etc", "//etc/./sub/x"):
        result = backend.write(path, "x")
        assert result.code == "permission_denied", path
        assert "protect" in (result.error or "") and "prefix:/etc" in (result.error or "")
    assert not (root / "etc" / "new").exists() and not (root / "etc" / "sub").exists()

    edited = backend.edit("/etc/conf", "1", "2")
    assert edited.code == "permission_denied"
    assert (root / "etc" / "conf").read_text() == "setting = 1\n"

    assert backend.delete("/etc/conf").code == "permission_denied"
    assert backend.delete("/etc").code == "permission_denied"
    assert (root / "etc" / "conf").exists()

    # reads are not governed; a sibling sharing the string prefix is allowed
    assert backend.read("/etc/conf").lines == ["setting = 1"]
    assert backend.write("/etc2/x", "ok").ok and (root / "etc2" / "x").read_text() == "ok"


def test_glob_deny_and_leaf_delete(guarded: tuple[PolicyBackend, Path]) -> None:
    backend, root = guarded
    denied = backend.write("/deep/dir/new.pem", "x")
    assert denied.code == "permission_denied" and "glob:/**/*.pem" in (denied.error or "")
    assert backend.delete("/keys/id.pem").code == "permission_denied"
    # a directory holding (or possibly holding) a protected file is refused whole
    assert backend.delete("/keys").code == "permission_denied"
    assert (root / "keys" / "id.pem").exists()
    # a plain file is a confirmed leaf: allowed despite the root-anchored glob
    assert backend.delete("/notes.txt").ok and not (root / "notes.txt").exists()
    assert backend.write("/deep/dir/new.txt", "fine").ok


def test_upload_is_judged_per_file(guarded: tuple[PolicyBackend, Path]) -> None:
    backend, root = guarded
    results = backend.upload([("/etc/a", b"a"), ("/ok/b", b"b"), ("/c.pem", b"c")])
    assert [r.path for r in results] == ["/etc/a", "/ok/b", "/c.pem"]
    assert [r.code for r in results] == ["permission_denied", None, "permission_denied"]
    assert (root / "ok" / "b").read_bytes() == b"b"
    assert not (root / "etc" / "a").exists() and not (root / "c.pem").exists()


def test_deny_write_operations_subset(tmp_path: Path) -> None:
    policy = DenyWritePolicy("no-delete", prefixes=["/data"], operations=["delete"])
    backend = PolicyBackend(FilesystemBackend(tmp_path), [policy])
    assert backend.write("/data/x", "x").ok
    assert backend.delete("/data/x").code == "permission_denied"
    with pytest.raises(ValueError, match="governs"):
        DenyWritePolicy("bad", prefixes=["/x"], operations=["read"])


# --------------------------------------------------------------------------- #
# (3) secret patterns
# --------------------------------------------------------------------------- #


@pytest.fixture
def scanned(tmp_path: Path) -> tuple[PolicyBackend, Path]:
    policy = SecretScanPolicy("no-secrets", list(BUILTIN_SECRET_RULES.values()))
    return PolicyBackend(FilesystemBackend(tmp_path), [policy]), tmp_path


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        (f"{PEM_HEADER}\nMIIEow...\n", "pem_private_key"),
        (f"aws_key_id: {AWS_KEY}\n", "aws_access_key_id"),
        (f"token={GITHUB_TOKEN}\n", "github_token"),
        (f"{API_KEY_LINE}\n", "generic_api_key"),
    ],
)
def test_write_refuses_secrets_naming_the_rule(
    scanned: tuple[PolicyBackend, Path], content: str, rule: str
) -> None:
    backend, root = scanned
    result = backend.write("/config.py", content)
    assert result.code == "permission_denied"
    assert f"'{rule}'" in (result.error or "") and "no-secrets" in (result.error or "")
    secret_line = content.splitlines()[0]
    assert secret_line not in (result.error or "")
    assert not (root / "config.py").exists()


def test_ordinary_code_is_not_a_secret(scanned: tuple[PolicyBackend, Path]) -> None:
    backend, _ = scanned
    text = "api_key = os.environ['API_KEY']\napi_key = settings.openai_api_key\nAKIA = 1\n"
    assert backend.write("/ok.py", text).ok


def test_edit_refuses_new_secret_and_assembled_secret(scanned: tuple[PolicyBackend, Path]) -> None:
    backend, root = scanned
    target = root / "settings.py"
    target.write_text(f"KEY = 'PLACEHOLDER'\nPART = '{AWS_KEY[:10]}XXXXXX'\n")
    before = target.read_text()

    direct = backend.edit("/settings.py", "PLACEHOLDER", AWS_KEY)
    assert direct.code == "permission_denied" and "aws_access_key_id" in (direct.error or "")

    # new_string alone is harmless; the file it produces holds a full key id
    assembled = backend.edit("/settings.py", "XXXXXX", AWS_KEY[10:])
    assert AWS_KEY[10:] not in AWS_KEY[:10]
    assert assembled.code == "permission_denied" and "aws_access_key_id" in (assembled.error or "")
    assert target.read_text() == before


def test_edit_of_file_with_existing_secret_is_judged_on_what_it_adds(
    scanned: tuple[PolicyBackend, Path],
) -> None:
    backend, root = scanned
    (root / "legacy.py").write_text(f"OLD = '{AWS_KEY}'\nname = 'a'\n")
    assert backend.edit("/legacy.py", "name = 'a'", "name = 'b'").ok
    again = backend.edit("/legacy.py", "name = 'b'", f"copy = '{AWS_KEY}'")
    assert again.code == "permission_denied"  # a second copy is still an addition
    # a missing file: only the replacement text is scanned; the backend reports the rest
    missing = backend.edit("/missing.py", "x", "y")
    assert missing.code == "file_not_found"


def test_upload_scans_text_not_binary(scanned: tuple[PolicyBackend, Path]) -> None:
    backend, root = scanned
    results = backend.upload(
        [("/a.env", f"X={AWS_KEY}\n".encode()), ("/b.bin", b"\x00" + AWS_KEY.encode())]
    )
    assert results[0].code == "permission_denied"
    assert "aws_access_key_id" in (results[0].error or "")
    assert results[1].ok and (root / "b.bin").exists() and not (root / "a.env").exists()


def test_custom_secret_pattern_from_config(tmp_path: Path) -> None:
    config = PolicyConfig.model_validate(
        {
            "policies": {
                "corp": {
                    "kind": "secret_scan",
                    "rules": ["pem_private_key"],
                    "patterns": {"corp_token": r"CORP-[0-9]{8}"},
                }
            },
            "default": ["corp"],
        }
    )
    backend = build_policy_chain(FilesystemBackend(tmp_path), config)
    refused = backend.write("/x", "t = CORP-12345678")
    assert refused.code == "permission_denied" and "'corp_token'" in (refused.error or "")
    assert backend.write("/y", f"k = {AWS_KEY}").ok  # only the named built-in applies


# --------------------------------------------------------------------------- #
# (4) audit log
# --------------------------------------------------------------------------- #


def _audit_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_audit_lines_for_ok_denied_and_error(tmp_path: Path) -> None:
    root, log = tmp_path / "ws", tmp_path / "logs" / "audit.jsonl"
    root.mkdir()
    marker = f"MARKER-{uuid.uuid4().hex}"
    policies: list[Policy] = [
        DenyWritePolicy("protect", prefixes=["/etc"]),
        SecretScanPolicy("no-secrets", list(BUILTIN_SECRET_RULES.values())),
    ]
    backend = PolicyBackend(LocalShellBackend(root), policies, audit=FileAuditSink(log))
    command = f"echo {marker}"
    with audit_context(workflow_id="wf-1", tool_call_id="call-7"):
        assert backend.write("/ok.txt", marker).ok
        assert backend.write("/etc/x", marker).code == "permission_denied"
        assert backend.write("/k.txt", f"{marker} {AWS_KEY}").code == "permission_denied"
        assert backend.read("/missing.txt").code == "file_not_found"
        assert backend.read("/ok.txt").lines == [marker]
        assert backend.edit("/ok.txt", marker, marker + "2").ok
        assert backend.grep(marker, "/").matches
        ups = backend.upload([("/u1", marker.encode()), ("/etc/u2", marker.encode())])
        assert [u.ok for u in ups] == [True, False]
        assert backend.download(["/u1"])[0].content == marker.encode()
        executed = backend.execute(command)
        assert marker in executed.output
        with pytest.raises(AttributeError):
            backend.write("/broken", None)  # type: ignore[arg-type]
    assert current_audit_context().workflow_id is None  # context restored

    text = log.read_text()
    assert marker not in text, "audit log must never contain content or command text"
    lines = _audit_lines(log)
    summary = [(r["operation"], r["path"], r["outcome"], r["code"]) for r in lines]
    assert summary == [
        ("write", "/ok.txt", "ok", None),
        ("write", "/etc/x", "denied", "permission_denied"),
        ("write", "/k.txt", "denied", "permission_denied"),
        ("read", "/missing.txt", "error", "file_not_found"),
        ("read", "/ok.txt", "ok", None),
        ("edit", "/ok.txt", "ok", None),
        ("grep", "/", "ok", None),
        ("upload", "/u1", "ok", None),
        ("upload", "/etc/u2", "denied", "permission_denied"),
        ("download", "/u1", "ok", None),
        ("execute", None, "ok", None),
        ("write", "/broken", "error", "exception:AttributeError"),
    ]
    assert all(r["workflow_id"] == "wf-1" and r["tool_call_id"] == "call-7" for r in lines)
    assert [(r["policy"], r["rule"]) for r in lines if r["outcome"] == "denied"] == [
        ("protect", "prefix:/etc"),
        ("no-secrets", "aws_access_key_id"),
        ("protect", "prefix:/etc"),
    ]
    by_op = {(r["operation"], r["path"]): r for r in lines}
    size = len(marker)
    assert by_op[("write", "/ok.txt")]["bytes"] == size
    assert by_op[("read", "/ok.txt")]["bytes"] == size + 1
    assert by_op[("download", "/u1")]["bytes"] == size
    exec_line = by_op[("execute", None)]
    assert exec_line["command_sha256"] == hashlib.sha256(command.encode()).hexdigest()
    assert exec_line["command_length"] == len(command) and exec_line["exit_code"] == 0
    assert all(set(r) == set(lines[0]) for r in lines), "stable keys"
    assert (log.stat().st_mode & 0o777) == 0o600


def test_audit_context_is_per_thread(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    (tmp_path / "ws").mkdir()
    backend = PolicyBackend(FilesystemBackend(tmp_path / "ws"), audit=FileAuditSink(log))

    def work(n: int) -> None:
        with audit_context(workflow_id=f"wf-{n}", tool_call_id=f"tc-{n}"):
            for _ in range(20):
                backend.write(f"/f{n}.txt", "x")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = _audit_lines(log)
    assert len(lines) == 80
    assert all(r["path"] == f"/f{str(r['workflow_id'])[3:]}.txt" for r in lines)
    assert all(r["tool_call_id"] == "tc-" + str(r["workflow_id"])[3:] for r in lines)


# --------------------------------------------------------------------------- #
# (5) rate limits
# --------------------------------------------------------------------------- #


@pytest.mark.timing
@pytest.mark.slow
def test_rate_limit_spaces_calls_in_real_time(tmp_path: Path) -> None:
    limiter = RateLimitPolicy("throttle", TokenBucket(10, burst=1))
    backend = PolicyBackend(FilesystemBackend(tmp_path), [limiter])
    started = time.monotonic()
    for _ in range(5):
        assert backend.ls("/").ok
    elapsed = time.monotonic() - started
    assert 0.35 <= elapsed < 2.0, elapsed


def test_rate_limit_fake_clock_is_exact(tmp_path: Path) -> None:
    clock = FakeClock()
    limiter = RateLimitPolicy("throttle", TokenBucket(10, 3, clock=clock, sleep=clock.sleep))
    backend = PolicyBackend(FilesystemBackend(tmp_path), [limiter])
    for _ in range(6):
        backend.ls("/")
    assert clock.sleeps == pytest.approx([0.1, 0.1, 0.1])  # burst of 3, then 10/s
    clock.now += 10  # idle: the bucket refills to its burst, not beyond
    for _ in range(4):
        backend.ls("/")
    assert clock.sleeps == pytest.approx([0.1] * 4)


def test_rate_limit_max_wait_refuses_without_spending(tmp_path: Path) -> None:
    clock = FakeClock()
    limiter = RateLimitPolicy(
        "throttle", TokenBucket(1, 1, clock=clock, sleep=clock.sleep), max_wait_seconds=0.5,
        operations=["write"],
    )  # fmt: skip
    backend = PolicyBackend(FilesystemBackend(tmp_path), [limiter])
    assert backend.write("/a", "a").ok
    refused = backend.write("/b", "b")
    assert refused.code == "timeout" and "rate limit" in (refused.error or "")
    assert backend.ls("/").ok  # not a governed operation
    clock.now += 0.6  # 0.4 s left to wait: within max_wait now
    assert backend.write("/c", "c").ok
    assert clock.sleeps == pytest.approx([0.4])
    assert not (tmp_path / "b").exists()


def test_token_bucket_orders_concurrent_callers() -> None:
    clock = FakeClock()
    bucket = TokenBucket(4, 1, clock=clock, sleep=clock.sleep)
    waits = [bucket.reserve() for _ in range(4)]  # reserved at the same instant
    assert waits == pytest.approx([0.0, 0.25, 0.5, 0.75])
    with pytest.raises(ValueError):
        TokenBucket(0)


# --------------------------------------------------------------------------- #
# configuration
# --------------------------------------------------------------------------- #


def test_config_from_env_file_builds_the_chain(tmp_path: Path) -> None:
    log = tmp_path / "audit" / "log.jsonl"
    config_file = tmp_path / "policy.json"
    config_file.write_text(
        json.dumps(
            {
                "policies": {
                    "protect": {"kind": "deny_write", "prefixes": ["/etc"]},
                    "no-secrets": {"kind": "secret_scan"},
                    "no-exec": {"kind": "deny_operations", "operations": ["execute"]},
                    "throttle": {"kind": "rate_limit", "calls_per_second": 1000, "burst": 10},
                },
                "default": ["protect"],
                "audit_file": str(log),
            }
        )
    )
    config = PolicyConfig.from_env({"FILEGATE_POLICY_FILE": str(config_file)})
    (tmp_path / "ws").mkdir()
    shell = LocalShellBackend(tmp_path / "ws")

    default = build_policy_chain(shell, config)
    assert default.write("/etc/x", "x").code == "permission_denied"
    assert default.write("/x", AWS_KEY).ok  # secret scan not selected
    assert default.can_execute is True

    named = build_policy_chain(shell, config, ["no-secrets", "no-exec", "throttle"])
    assert named.write("/y", AWS_KEY).code == "permission_denied"
    assert named.can_execute is False and named.execute("true").code == "permission_denied"
    assert named.write("/etc/ok", "x").ok  # protect not selected

    assert config.policy("throttle") is config.policy("throttle"), "shared bucket"
    assert len(_audit_lines(log)) == 5  # 3 writes + execute + write; capabilities are not calls

    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        build_policy_chain(shell, config, ["nope"])


def test_config_inline_json_and_empty(tmp_path: Path) -> None:
    fs = FilesystemBackend(tmp_path)
    assert build_policy_chain(fs, PolicyConfig.from_env({})) is fs
    inline = '{"policies": {"p": {"kind": "deny_write", "globs": ["/**/*.key"]}}}'
    config = PolicyConfig.from_env({"FILEGATE_POLICY_JSON": inline})
    assert build_policy_chain(fs, config, []) is fs
    assert build_policy_chain(fs, config, ["p"]).write("/a/b.key", "k").code == "permission_denied"
    with pytest.raises(ValueError, match="only one"):
        PolicyConfig.from_env({"FILEGATE_POLICY_JSON": inline, "FILEGATE_POLICY_FILE": "x"})


@pytest.mark.parametrize(
    "policies",
    [
        {"p": {"kind": "no_such_kind"}},
        {"p": {"kind": "deny_write", "globs": ["relative/*.txt"]}},
        {"p": {"kind": "deny_write", "prefixes": ["/a/../b"]}},
        {"p": {"kind": "deny_write", "operations": ["read"]}},
        {"p": {"kind": "secret_scan", "rules": ["nonexistent"]}},
        {"p": {"kind": "secret_scan", "patterns": {"bad": "([unclosed"}}},
        {"p": {"kind": "rate_limit", "calls_per_second": 0}},
        {"p": {"kind": "deny_operations", "operations": ["format_disk"]}},
        {"bad name!": {"kind": "secret_scan"}},
    ],
)
def test_bad_config_fails_at_load(policies: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        PolicyConfig.model_validate({"policies": policies})


def test_unknown_default_name_fails_at_load() -> None:
    with pytest.raises(ValidationError, match="unknown policy"):
        PolicyConfig.model_validate({"policies": {}, "default": ["missing"]})


def test_registry_lists_the_shipped_kinds() -> None:
    assert {"deny_write", "secret_scan", "rate_limit", "deny_operations"} <= set(POLICY_KINDS)


def test_required_policies_cannot_be_dropped_by_the_workflow(tmp_path: Path) -> None:
    config = PolicyConfig.model_validate(
        {
            "policies": {
                "protect": {"kind": "deny_write", "prefixes": ["/etc"]},
                "no-secrets": {"kind": "secret_scan"},
            },
            "required": ["protect"],
            "default": ["no-secrets"],
        }
    )
    fs = FilesystemBackend(tmp_path)
    for names in (None, [], ["no-secrets"]):
        backend = build_policy_chain(fs, config, names)
        assert backend.write("/etc/x", "x").code == "permission_denied", names
    assert build_policy_chain(fs, config, []).write("/k", AWS_KEY).ok
    assert build_policy_chain(fs, config).write("/k", AWS_KEY).code == "permission_denied"
