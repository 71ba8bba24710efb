"""Table-driven tests for the permission rules (contract §4-5)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from filegate.backends import (
    FileInfo,
    FilesystemPermission,
    GrepMatch,
    check_permission,
    delete_blockers,
    filter_grep_matches,
    filter_ls_entries,
    filter_paths,
    first_matching_rule,
    interrupt_fires,
    matching_interrupt_rule,
)
from filegate.kernel.execute_gate import ExecuteGateError, check_execute_gate
from filegate.kernel.permissions import delete_blocked_message
from filegate.kernel.rule_patterns import glob_anchor


def rule(mode: str, *paths: str, ops: tuple[str, ...] = ("read", "write")) -> FilesystemPermission:
    return FilesystemPermission(operations=list(ops), paths=list(paths), mode=mode)  # type: ignore[arg-type]


def deny(*paths: str, ops: tuple[str, ...] = ("read", "write")) -> FilesystemPermission:
    return rule("deny", *paths, ops=ops)


def allow(*paths: str, ops: tuple[str, ...] = ("read", "write")) -> FilesystemPermission:
    return rule("allow", *paths, ops=ops)


def interrupt(*paths: str, ops: tuple[str, ...] = ("read", "write")) -> FilesystemPermission:
    return rule("interrupt", *paths, ops=ops)


# --------------------------------------------------------------------------- #
# The rule model
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("secrets/**", "must be absolute"),
        ("", "non-empty"),
        ("/a/../b", "'..'"),
        ("/..", "'..'"),
        ("/a/{..,b}/c", "'..'"),  # climbing hidden inside a brace alternative
        ("~/notes", "'~' is not supported"),
        ("/home/~user/x", "'~' is not supported"),
        ("/a/{b,c", None),  # unbalanced braces are literal in wcmatch: accepted
    ],
)
def test_rule_path_validation(path: str, message: str | None) -> None:
    if message is None:
        FilesystemPermission(operations=["read"], paths=[path])
        return
    with pytest.raises(ValueError, match=message) as info:
        FilesystemPermission(operations=["read"], paths=[path])
    assert isinstance(info.value, ValidationError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"operations": [], "paths": ["/x"]},
        {"operations": ["read"], "paths": []},
        {"operations": ["execute"], "paths": ["/x"]},
        {"operations": ["read"], "paths": ["/x"], "mode": "ask"},
        {"operations": ["read"], "paths": ["/x"], "extra": 1},
    ],
)
def test_rule_field_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        FilesystemPermission(**kwargs)


def test_rule_paths_are_normalised_and_json_round_trips() -> None:
    r = FilesystemPermission(operations=["write"], paths=["/a/./b//c/", "/x/**/"], mode="deny")
    assert r.paths == ["/a/b/c", "/x/**"]
    assert r.mode == "deny"
    again = FilesystemPermission.model_validate_json(r.model_dump_json())
    assert again == r
    assert FilesystemPermission(operations=["read"], paths=["/"]).mode == "allow"


def test_trailing_slash_rule_matches_the_directory() -> None:
    rules = [deny("/secrets/")]
    assert check_permission(rules, "ls", "/secrets") == "deny"
    assert check_permission(rules, "ls", "/secrets/") == "deny"


# --------------------------------------------------------------------------- #
# check_permission / first_matching_rule
# --------------------------------------------------------------------------- #

SECRETS = [deny("/secrets/**")]

CHECK_CASES: list[tuple[str, list[FilesystemPermission], str, str, str]] = [
    # (id, rules, operation, path, expected)
    ("no rules", [], "read_file", "/anything", "allow"),
    ("inside", SECRETS, "read_file", "/secrets/key", "deny"),
    ("dotfile", SECRETS, "read_file", "/secrets/.env", "deny"),
    ("dot dir", SECRETS, "read_file", "/secrets/.ssh/id_rsa", "deny"),
    ("deep", SECRETS, "write_file", "/secrets/a/b/c/d", "deny"),
    ("dir itself not matched by /**", SECRETS, "ls", "/secrets", "allow"),
    ("trailing slash", SECRETS, "ls", "/secrets/", "allow"),
    ("dot component", SECRETS, "read_file", "/secrets/./x", "deny"),
    ("double slash", SECRETS, "read_file", "//secrets//x", "deny"),
    ("relative input", SECRETS, "read_file", "secrets/x", "deny"),
    ("dot-relative input", SECRETS, "read_file", "./secrets/x", "deny"),
    ("sibling prefix", SECRETS, "read_file", "/secrets2/x", "allow"),
    ("root star-star", [deny("/**")], "read_file", "/.git/config", "deny"),
    ("root star-star root", [deny("/**")], "ls", "/", "deny"),
    ("root star", [deny("/*")], "read_file", "/.env", "deny"),
    ("star in middle dotdir", [deny("/a/*/c")], "read_file", "/a/.b/c", "deny"),
    ("star one level", [deny("/a/*")], "read_file", "/a/b/c", "allow"),
    ("braces a", [deny("/{a,b}/x")], "read_file", "/a/x", "deny"),
    ("braces b", [deny("/{a,b}/x")], "read_file", "/b/x", "deny"),
    ("braces other", [deny("/{a,b}/x")], "read_file", "/c/x", "allow"),
    ("brace ext", [deny("/src/*.{py,txt}")], "read_file", "/src/m.py", "deny"),
    ("brace ext no", [deny("/src/*.{py,txt}")], "read_file", "/src/m.md", "allow"),
    ("question", [deny("/a/b?")], "read_file", "/a/bc", "deny"),
    ("question exact length", [deny("/a/b?")], "read_file", "/a/bcd", "allow"),
    ("question dot", [deny("/a/?env")], "read_file", "/a/.env", "deny"),
    ("class", [deny("/a/[xy].txt")], "read_file", "/a/y.txt", "deny"),
    ("globstar middle", [deny("/**/id_rsa")], "read_file", "/home/.ssh/id_rsa", "deny"),
    ("case sensitive", SECRETS, "read_file", "/Secrets/x", "allow"),
    ("literal a..b name", [deny("/a..b.txt")], "read_file", "/a..b.txt", "deny"),
    (
        "deny before allow",
        [deny("/src/secret.py"), allow("/src/**")],
        "read_file",
        "/src/secret.py",
        "deny",
    ),
    (
        "allow before deny",
        [allow("/src/**"), deny("/src/secret.py")],
        "read_file",
        "/src/secret.py",
        "allow",
    ),
    ("allow then deny-all", [allow("/pub/**"), deny("/**")], "read_file", "/pub/a", "allow"),
    ("allow then deny-all other", [allow("/pub/**"), deny("/**")], "read_file", "/b", "deny"),
    ("op mismatch read", [deny("/x/**", ops=("write",))], "read_file", "/x/a", "allow"),
    ("op mismatch write", [deny("/x/**", ops=("read",))], "write_file", "/x/a", "allow"),
    ("op write edit", [deny("/x/**", ops=("write",))], "edit_file", "/x/a", "deny"),
    ("op write delete", [deny("/x/**", ops=("write",))], "delete", "/x/a", "deny"),
    ("op read ls", [deny("/x/**", ops=("read",))], "ls", "/x/a", "deny"),
    ("op read glob", [deny("/x/**", ops=("read",))], "glob", "/x/a", "deny"),
    ("op read grep", [deny("/x/**", ops=("read",))], "grep", "/x/a", "deny"),
    ("op name read", [deny("/x/**", ops=("read",))], "read", "/x/a", "deny"),
    ("op name write", [deny("/x/**", ops=("read",))], "write", "/x/a", "allow"),
    ("interrupt", [interrupt("/x/**")], "read_file", "/x/a", "interrupt"),
    ("deny before interrupt", [deny("/x/a"), interrupt("/x/**")], "read_file", "/x/a", "deny"),
    ("skip non-matching", [deny("/y/**"), interrupt("/x/**")], "read_file", "/x/a", "interrupt"),
    ("second pattern", [deny("/y/**", "/x/*")], "read_file", "/x/a", "deny"),
]


@pytest.mark.parametrize(
    ("rules", "operation", "path", "expected"),
    [case[1:] for case in CHECK_CASES],
    ids=[case[0] for case in CHECK_CASES],
)
def test_check_permission(
    rules: list[FilesystemPermission], operation: str, path: str, expected: str
) -> None:
    assert check_permission(rules, operation, path) == expected


def test_first_matching_rule_returns_the_deciding_rule() -> None:
    first, second = deny("/a/x"), allow("/a/**")
    assert first_matching_rule([first, second], "read_file", "/a/x") is first
    assert first_matching_rule([first, second], "read_file", "/a/y") is second
    assert first_matching_rule([first, second], "read_file", "/b") is None


@pytest.mark.parametrize("path", ["/a/../etc/passwd", "~/x", "C:\\x", "/a\x00b"])
def test_invalid_paths_raise(path: str) -> None:
    with pytest.raises(ValueError):
        check_permission(SECRETS, "read_file", path)


@pytest.mark.parametrize("operation", ["execute", "cat", ""])
def test_unknown_operation_raises(operation: str) -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        check_permission(SECRETS, operation, "/x")


# --------------------------------------------------------------------------- #
# Result filters
# --------------------------------------------------------------------------- #

FILTER_RULES = [
    deny("/secrets/**", ops=("read",)),
    interrupt("/review/**", ops=("read",)),
    deny("/review/**", "/wo/**", ops=("write",)),
]


def test_filter_paths_drops_read_denied_keeps_interrupt() -> None:
    paths = ["/a.txt", "/secrets/k", "/secrets/.env", "/review/r.md", "/wo/x", "/secretsX/y"]
    assert filter_paths(FILTER_RULES, paths) == ["/a.txt", "/review/r.md", "/wo/x", "/secretsX/y"]


def test_filter_ls_entries_handles_directory_slash() -> None:
    entries = [
        FileInfo(path="/secrets/", is_dir=True),
        FileInfo(path="/secrets/.ssh/", is_dir=True),
        FileInfo(path="/secrets/key", size=3),
        FileInfo(path="/review/", is_dir=True),
        FileInfo(path="/readme.md", size=1),
    ]
    kept = filter_ls_entries(FILTER_RULES, entries)
    # /secrets itself is not matched by /secrets/** (its contents are).
    assert [e.path for e in kept] == ["/secrets/", "/review/", "/readme.md"]
    hide_dir = [deny("/secrets", "/secrets/**", ops=("read",))]
    assert [e.path for e in filter_ls_entries(hide_dir, entries)] == ["/review/", "/readme.md"]


def test_filter_grep_matches_counts_removed() -> None:
    matches = [
        GrepMatch(path="/a.py", line=1, text="x"),
        GrepMatch(path="/secrets/k", line=2, text="x"),
        GrepMatch(path="/secrets/k", line=9, text="x"),
        GrepMatch(path="/review/r", line=3, text="x"),
    ]
    kept, removed = filter_grep_matches(FILTER_RULES, matches)
    assert [(m.path, m.line) for m in kept] == [("/a.py", 1), ("/review/r", 3)]
    assert removed == 2
    kept, removed = filter_grep_matches([], matches)
    assert kept == matches and removed == 0


def test_filter_paths_with_unvalidatable_names() -> None:
    # A backslash is a separator in *input*, but a file can be named that on disk.
    assert filter_paths(SECRETS, ["/secrets/a\\b", "/pub/a\\b"]) == ["/pub/a\\b"]


def test_write_deny_does_not_filter_results() -> None:
    assert filter_paths([deny("/**", ops=("write",))], ["/a", "/b/c"]) == ["/a", "/b/c"]


# --------------------------------------------------------------------------- #
# Recursive delete
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("pattern", "anchor"),
    [
        ("/secrets/**", "/secrets"),
        ("/a/*/b", "/a"),
        ("/**/secrets", "/"),
        ("/a/b/c", "/a/b/c"),
        ("/a/b?/c", "/a"),
        ("/a/[bc]/d", "/a"),
        ("/x/{a,b}/y", "/x"),
        ("/{a,b}/y", "/"),
        ("/a/\\*/b", "/a"),
    ],
)
def test_glob_anchor(pattern: str, anchor: str) -> None:
    assert glob_anchor(pattern) == anchor


W = ("write",)
DELETE_CASES: list[tuple[str, list[FilesystemPermission], str, bool, list[str]]] = [
    # (id, rules, target, has_descendants, expected blockers)
    ("no rules", [], "/work", True, []),
    # literal patterns: either path contains the other
    ("literal inside target", [deny("/w/secret.txt", ops=W)], "/w", True, ["/w/secret.txt"]),
    ("literal is target", [deny("/w/secret.txt", ops=W)], "/w/secret.txt", True, ["/w/secret.txt"]),
    ("literal above target", [deny("/w/keep", ops=W)], "/w/keep/sub", True, ["/w/keep"]),
    ("literal disjoint", [deny("/w/secret.txt", ops=W)], "/other", True, []),
    ("literal sibling prefix", [deny("/w/secret", ops=W)], "/w/secret2", True, []),
    ("literal root target", [deny("/w/a", ops=W)], "/", True, ["/w/a"]),
    # wildcard patterns (the three reference examples)
    ("*.log vs notes.txt", [deny("/work/*.log", ops=W)], "/work/notes.txt", True, []),
    ("/work/* vs child", [deny("/work/*", ops=W)], "/work/app/child", True, ["/work/*"]),
    ("/work/*/secrets", [deny("/work/*/secrets", ops=W)], "/work/x", True, ["/work/*/secrets"]),
    (
        "/work/*/secrets deep",
        [deny("/work/*/secrets", ops=W)],
        "/work/x/y/z",
        True,
        ["/work/*/secrets"],
    ),
    # '/' anchor blocks everything
    ("globstar anchor", [deny("/**/secrets", ops=W)], "/tmp/x", True, ["/**/secrets"]),
    ("root star anchor", [deny("/*.lock", ops=W)], "/tmp/x", True, ["/*.lock"]),
    # target matches / anchor inside target / target under anchor
    ("target matches", [deny("/w/*.d", ops=W)], "/w/x.d", True, ["/w/*.d"]),
    ("anchor inside target", [deny("/w/s/**", ops=W)], "/w", True, ["/w/s/**"]),
    ("anchor equals target", [deny("/w/s/**", ops=W)], "/w/s", True, ["/w/s/**"]),
    ("pattern under target", [deny("/w/a/b/*.key", ops=W)], "/w/a", True, ["/w/a/b/*.key"]),
    ("globstar suffix under anchor", [deny("/w/**", ops=W)], "/w/a/b", True, ["/w/**"]),
    ("single suffix ancestor no match", [deny("/w/*.log", ops=W)], "/w/sub/deep", True, []),
    (
        "single suffix ancestor match",
        [deny("/w/*.log", ops=W)],
        "/w/a.log/deep",
        True,
        ["/w/*.log"],
    ),
    ("star-star inside component", [deny("/w/a**", ops=W)], "/w/x", True, ["/w/a**"]),
    ("disjoint wildcard", [deny("/w/**", ops=W)], "/v/x", True, []),
    ("disjoint sibling prefix", [deny("/w/**", ops=W)], "/ww", True, []),
    ("brace alternatives anchors", [deny("/{a,b}/**", ops=W)], "/c/x", True, []),
    ("brace alternative hit", [deny("/{a,b}/**", ops=W)], "/b", True, ["/{a,b}/**"]),
    # rule kinds that do not block
    ("read deny ignored", [deny("/w/**", ops=("read",))], "/w", True, []),
    ("interrupt ignored", [interrupt("/w/**")], "/w", True, []),
    ("allow ignored", [allow("/w/**")], "/w", True, []),
    # every blocking pattern is listed, in order
    (
        "lists all",
        [deny("/w/a/**", "/x/**", ops=W), deny("/w/*.key", ops=W)],
        "/w",
        True,
        ["/w/a/**", "/w/*.key"],
    ),
    # an earlier rule covering the whole subtree decides it (first match)
    ("earlier covering allow", [allow("/tmp/**", ops=W), deny("/**", ops=W)], "/tmp/x", True, []),
    (
        "earlier covering interrupt",
        [interrupt("/tmp/**", ops=W), deny("/**", ops=W)],
        "/tmp/x",
        True,
        [],
    ),
    (
        "allow not covering target itself",
        [allow("/tmp/**", ops=W), deny("/**", ops=W)],
        "/tmp",
        True,
        ["/**"],
    ),
    (
        "partial allow does not shadow",
        [allow("/w/pub/**", ops=W), deny("/w/**", ops=W)],
        "/w",
        True,
        ["/w/**"],
    ),
    (
        "earlier covering deny stops",
        [deny("/w/**", ops=W), deny("/w/x/*.k", ops=W)],
        "/w/x",
        True,
        ["/w/**"],
    ),
    # confirmed leaf: plain first match
    ("leaf denied", [deny("/w/*.key", ops=W)], "/w/a.key", False, ["/w/*.key"]),
    ("leaf allowed", [deny("/w/*.key", ops=W)], "/w/a.txt", False, []),
    (
        "leaf earlier allow",
        [allow("/w/a.key", ops=W), deny("/w/*.key", ops=W)],
        "/w/a.key",
        False,
        [],
    ),
    (
        "leaf only matching patterns",
        [deny("/w/*.key", "/z/**", ops=W)],
        "/w/a.key",
        False,
        ["/w/*.key"],
    ),
    ("leaf under protected dir literal", [deny("/w/keep", ops=W)], "/w/keep/f", False, []),
    ("leaf with anchor root", [deny("/**/secrets", ops=W)], "/tmp/x", False, []),
    ("leaf dotfile", [deny("/w/**", ops=W)], "/w/.env", False, ["/w/**"]),
]


@pytest.mark.parametrize(
    ("rules", "target", "has_descendants", "expected"),
    [case[1:] for case in DELETE_CASES],
    ids=[case[0] for case in DELETE_CASES],
)
def test_delete_blockers(
    rules: list[FilesystemPermission], target: str, has_descendants: bool, expected: list[str]
) -> None:
    assert delete_blockers(rules, target, has_descendants=has_descendants) == expected


def test_delete_target_is_validated() -> None:
    assert delete_blockers([deny("/w/**", ops=W)], "/w/./a/", has_descendants=True) == ["/w/**"]
    with pytest.raises(ValueError):
        delete_blockers([], "/w/../x")


def test_delete_blocked_message_lists_every_pattern() -> None:
    message = delete_blocked_message("/w", ["/w/a/**", "/w/*.key"])
    assert "/w/a/**" in message and "/w/*.key" in message and "/w" in message


# --------------------------------------------------------------------------- #
# Interrupt predicates
# --------------------------------------------------------------------------- #

R = ("read",)
INTERRUPT_CASES: list[tuple[str, list[FilesystemPermission], str, dict[str, Any], bool]] = [
    # exact tools
    ("exact hit", [interrupt("/s/**", ops=R)], "read_file", {"file_path": "/s/a"}, True),
    ("exact miss", [interrupt("/s/**", ops=R)], "read_file", {"file_path": "/t/a"}, False),
    ("exact dotfile", [interrupt("/s/**", ops=R)], "read_file", {"file_path": "/s/.env"}, True),
    ("exact normalised", [interrupt("/s/**", ops=R)], "read_file", {"file_path": "s/./a"}, True),
    ("exact op mismatch", [interrupt("/s/**", ops=R)], "write_file", {"file_path": "/s/a"}, False),
    ("exact write", [interrupt("/s/**", ops=W)], "edit_file", {"file_path": "/s/a"}, True),
    (
        "exact earlier deny",
        [deny("/s/a"), interrupt("/s/**")],
        "read_file",
        {"file_path": "/s/a"},
        False,
    ),
    (
        "exact earlier allow",
        [allow("/s/a"), interrupt("/s/**")],
        "read_file",
        {"file_path": "/s/a"},
        False,
    ),
    ("exact invalid path", [interrupt("/**")], "read_file", {"file_path": "/../etc"}, False),
    # the gate refuses these before anyone is asked (contract §5), so they never wait
    ("exact missing path", [interrupt("/s/**")], "write_file", {}, False),
    ("exact blank path", [interrupt("/**")], "write_file", {"file_path": " "}, False),
    ("exact wrong key", [interrupt("/s/**")], "read_file", {"path": "/s/a"}, False),
    # bulk: root overlaps anchor
    ("ls root above", [interrupt("/s/**", ops=R)], "ls", {"path": "/"}, True),
    ("ls the anchor", [interrupt("/s/**", ops=R)], "ls", {"path": "/s"}, True),
    ("ls inside", [interrupt("/s/**", ops=R)], "ls", {"path": "/s/deep/er"}, True),
    ("ls disjoint", [interrupt("/s/**", ops=R)], "ls", {"path": "/t"}, False),
    ("ls sibling prefix", [interrupt("/s/**", ops=R)], "ls", {"path": "/s2"}, False),
    ("ls trailing slash", [interrupt("/s/**", ops=R)], "ls", {"path": "/s/"}, True),
    ("ls write-only rule", [interrupt("/s/**", ops=W)], "ls", {"path": "/"}, False),
    (
        "grep literal rule",
        [interrupt("/s/key", ops=R)],
        "grep",
        {"pattern": "x", "path": "/s"},
        True,
    ),
    (
        "anchorless rule",
        [interrupt("/**/secret", ops=R)],
        "grep",
        {"pattern": "x", "path": "/t"},
        True,
    ),
    # the three holes
    ("ls path None", [interrupt("/s/**", ops=R)], "ls", {"path": None}, True),
    ("ls path missing", [interrupt("/s/**", ops=R)], "ls", {}, True),
    ("ls dot", [interrupt("/s/**", ops=R)], "ls", {"path": "."}, True),
    ("ls empty", [interrupt("/s/**", ops=R)], "ls", {"path": ""}, True),
    ("grep no path", [interrupt("/s/**", ops=R)], "grep", {"pattern": "TODO"}, True),
    (
        "grep path None",
        [interrupt("/s/**", ops=R)],
        "grep",
        {"pattern": "TODO", "path": None, "glob": "*.py"},
        True,
    ),
    (
        "glob re-roots",
        [interrupt("/s/**", ops=R)],
        "glob",
        {"pattern": "/s/**", "path": "/w"},
        True,
    ),
    (
        "glob re-roots brace",
        [interrupt("/s/**", ops=R)],
        "glob",
        {"pattern": "/{t,s}/*.txt", "path": "/w"},
        True,
    ),
    (
        "glob absolute elsewhere",
        [interrupt("/s/**", ops=R)],
        "glob",
        {"pattern": "/t/**", "path": "/w"},
        False,
    ),
    (
        "glob absolute invalid path",  # the gate validates path even then: refused
        [interrupt("/s/**", ops=R)],
        "glob",
        {"pattern": "/s/*", "path": "~"},
        False,
    ),
    ("glob climbs", [interrupt("/s/**", ops=R)], "glob", {"pattern": "../s/*", "path": "/w"}, True),
    (
        "glob climbs deep",
        [interrupt("/s/**", ops=R)],
        "glob",
        {"pattern": "a/../../s/*", "path": "/w"},
        True,
    ),
    (
        "glob relative stays",
        [interrupt("/s/**", ops=R)],
        "glob",
        {"pattern": "*.py", "path": "/w"},
        False,
    ),
    (
        "glob relative under",
        [interrupt("/s/**", ops=R)],
        "glob",
        {"pattern": "**/*.py", "path": "/s/x"},
        True,
    ),
    ("glob no path", [interrupt("/s/**", ops=R)], "glob", {"pattern": "*.py"}, True),
    ("glob dot path", [interrupt("/s/**", ops=R)], "glob", {"pattern": "*.py", "path": "."}, True),
    # delete is bulk and governed by write
    ("delete parent", [interrupt("/s/**", ops=W)], "delete", {"file_path": "/"}, True),
    ("delete inside", [interrupt("/s/**", ops=W)], "delete", {"file_path": "/s/a"}, True),
    ("delete disjoint", [interrupt("/s/**", ops=W)], "delete", {"file_path": "/t"}, False),
    ("delete read rule", [interrupt("/s/**", ops=R)], "delete", {"file_path": "/s"}, False),
    # earlier rule covering the whole subtree wins
    (
        "bulk earlier deny covers",
        [deny("/s/**", ops=R), interrupt("/s/**", ops=R)],
        "ls",
        {"path": "/s/x"},
        False,
    ),
    (
        "bulk earlier deny-all covers root",
        [deny("/**", ops=R), interrupt("/s/**", ops=R)],
        "grep",
        {"pattern": "x"},
        False,
    ),
    (
        "bulk earlier deny partial",
        [deny("/s/a/**", ops=R), interrupt("/s/**", ops=R)],
        "ls",
        {"path": "/s"},
        True,
    ),
    (
        "bulk deny covers every answer",  # ls /s runs unasked; the filter leaves nothing
        [deny("/s/**", ops=R), interrupt("/s/**", ops=R)],
        "ls",
        {"path": "/s"},
        False,
    ),
    (
        "bulk earlier allow covers",
        [allow("/s/pub/**", ops=R), interrupt("/s/**", ops=R)],
        "ls",
        {"path": "/s/pub/x"},
        False,
    ),
    (
        "bulk later deny irrelevant",
        [interrupt("/s/**", ops=R), deny("/**", ops=R)],
        "ls",
        {"path": "/s/x"},
        True,
    ),
    (
        "delete earlier deny covers",
        [deny("/s/**", ops=W), interrupt("/**", ops=W)],
        "delete",
        {"file_path": "/s/x"},
        False,
    ),
    # non-file tools never interrupt on path rules
    ("execute", [interrupt("/**")], "execute", {"command": "cat /s/x"}, False),
    ("no interrupt rules", [deny("/**")], "ls", {"path": "/"}, False),
]


@pytest.mark.parametrize(
    ("rules", "tool", "args", "expected"),
    [case[1:] for case in INTERRUPT_CASES],
    ids=[case[0] for case in INTERRUPT_CASES],
)
def test_interrupt_fires(
    rules: list[FilesystemPermission], tool: str, args: dict[str, Any], expected: bool
) -> None:
    assert interrupt_fires(rules, tool, args) is expected


def test_matching_interrupt_rule_names_the_rule() -> None:
    first = interrupt("/a/**", ops=R)
    second = interrupt("/b/**", ops=R)
    assert matching_interrupt_rule([first, second], "ls", {"path": "/b/x"}) is second
    assert matching_interrupt_rule([first, second], "ls", {"path": "/"}) is first
    assert matching_interrupt_rule([first, second], "read_file", {"file_path": "/c"}) is None


# --------------------------------------------------------------------------- #
# Configuration check
# --------------------------------------------------------------------------- #


def test_execute_gate_refuses_protecting_rules_next_to_a_host_shell() -> None:
    with pytest.raises(ExecuteGateError, match=r"rule 1 \(deny .*'shell'"):
        check_execute_gate(SECRETS, backend="shell", can_execute=True)
    with pytest.raises(ExecuteGateError, match="/secrets"):
        check_execute_gate(
            [deny("/memories/**", "/secrets/**")],
            backend="shell",
            can_execute=True,
            unreachable_prefixes=["/memories/"],
        )
    with pytest.raises(ExecuteGateError):  # anchor '/' escapes every route
        check_execute_gate(
            [deny("/**/x")], backend="b", can_execute=True, unreachable_prefixes=["/memories"]
        )
    with pytest.raises(ExecuteGateError):  # whole components: /memories2 is not inside /memories
        check_execute_gate(
            [deny("/memories2/**")],
            backend="b",
            can_execute=True,
            unreachable_prefixes=["/memories"],
        )


def test_execute_gate_accepts_scoped_or_harmless_setups() -> None:
    check_execute_gate([], backend="b", can_execute=True)
    check_execute_gate(SECRETS, backend="b", can_execute=False)
    check_execute_gate(SECRETS, backend="b", can_execute=True, execute_gated=True)
    allow_only = [FilesystemPermission(operations=["read", "write"], paths=["/**"])]
    check_execute_gate(allow_only, backend="b", can_execute=True)  # allow needs no enforcement
    check_execute_gate(
        [deny("/memories/**"), interrupt("/store/{a,b}/*")],
        backend="b",
        can_execute=True,
        unreachable_prefixes=["/memories/", "/store"],
    )


# --------------------------------------------------------------------------- #
# The sandbox-safe matcher agrees with wcmatch.globmatch
# --------------------------------------------------------------------------- #

EQUIVALENCE_PATTERNS = [
    "/**",
    "/*",
    "/secrets/**",
    "/secrets",
    "/a/*/c",
    "/**/id_rsa",
    "/{a,b}/x",
    "/src/*.{py,txt}",
    "/a/b?",
    "/a/[xy].txt",
    "/a/\\*",
    "/a/**/b/**",
    "/a..b.txt",
]
EQUIVALENCE_PATHS = [
    "/",
    "/a",
    "/a/b",
    "/a/bc",
    "/a/*",
    "/a/x.txt",
    "/a/.b/c",
    "/a/b/c",
    "/a/q/b/z",
    "/b/x",
    "/secrets",
    "/secrets/.env",
    "/secrets/.ssh/id_rsa",
    "/src/m.py",
    "/.git/config",
    "/home/.ssh/id_rsa",
    "/a..b.txt",
]


def test_regex_matcher_equals_wcmatch_globmatch() -> None:
    """Rules match through wcmatch's regex translation (sandbox-safe); it must
    agree with wcmatch's own matcher on every validated path."""
    from wcmatch import glob as wc_glob

    from filegate.kernel.rule_patterns import RULE_FLAGS, pattern_matches

    for pattern in EQUIVALENCE_PATTERNS:
        for path in EQUIVALENCE_PATHS:
            expected = wc_glob.globmatch(path, pattern, flags=RULE_FLAGS)
            assert pattern_matches(pattern, path) is expected, (pattern, path)
