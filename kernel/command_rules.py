"""Command-prefix allow rules for ``execute`` (``interrupt_on.execute.allow_prefixes``).

A prefix rule waives the *human question* for commands that start with an
allowed argv (``git status``, ``pytest -q``); nothing else. The execute gate,
deny rules and the sandbox's view apply to an allowed command exactly as to
any other (``kernel.execute_gate``): this is a convenience, not a security
boundary.

Because a match runs a command no human saw, the matcher is strict and fails
closed: a command is *allowed* only when it is one simple command whose argv,
as ``/bin/sh -c`` would build it, starts with the prefix's argv token for
token. Anything the matcher cannot judge that way is not allowed (it asks):

- a command shlex cannot split (an unclosed quote);
- a shell operator outside quotes, escaped or not: ``; & | < > ( )``
  (so ``&&``, ``||``, ``|&``, redirections, subshells, process substitution);
- ``$`` or a backtick anywhere, even inside quotes (``"$(rm -rf /)"``
  expands inside double quotes; single quotes would be safe, but one rule
  for all quoting is easier to trust);
- a control or invisible formatting character anywhere, tab excepted
  (newline, carriage return, NUL, zero-width and bidi controls, Unicode line
  separators): the shell and shlex split some of them differently, and a
  reader cannot see them;
- a comment (an unquoted ``#`` starting a word: the shell drops the rest);
- a leading environment assignment (``FOO=1 git status``).

Tokens compare by exact string equality after quote removal, so
``git  status`` and ``git 'status'`` are ``git status``, while
``'git status'`` (one token), ``git statusx`` and look-alike letters
(Cyrillic ``ѕ``) are not. Prefixes are validated with the same rules, and
may not hold glob characters (``* ? [``), a leading ``~`` or a ``#``: the
shell would expand or drop those, so a literal comparison would not mean
what it says.

Pure: ``json``, ``re`` and ``shlex`` only (the workflow sandbox imports this).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable

SHELL_OPERATOR_CHARS = frozenset(";&|<>()")
"""Characters that end or redirect a simple command when they are not quoted."""

EXPANSION_CHARS = frozenset("$`")
"""Characters that start an expansion (parameter, command, arithmetic): refused anywhere."""

_INVISIBLE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]"
)
"""Control characters but tab (C0, DEL, C1) and invisible formatting ones (zero-width,
bidi, separators). Tab separates words for both the shell and shlex; newline ends a command."""

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
"""A word the shell takes as a variable assignment when it comes before the command."""

_PREFIX_ONLY_REFUSED = frozenset("*?[#")
"""Not in a prefix: glob characters and '#' (the shell expands or drops them)."""


class CommandPrefixError(ValueError):
    """An ``allow_prefixes`` entry that cannot be compared literally; one line, names it."""


def _unsafe_reason(command: str) -> str | None:
    """Why ``command`` is not one simple command with literal words, or None.

    Scans as ``/bin/sh`` quotes: outside quotes a backslash escapes the next
    character, inside single quotes nothing is special, inside double quotes a
    backslash escapes the next character. An operator character outside
    quotes is refused even when escaped (strict: no judgement of escapes).
    """
    found = _INVISIBLE.search(command)
    if found:
        return f"control or invisible character {found.group()!r}"
    for char in EXPANSION_CHARS:
        if char in command:
            return f"{char!r} (shell expansion)"
    state = ""  # "", "'" or '"'
    index = 0
    while index < len(command):
        char = command[index]
        if state == "'":
            state = "" if char == "'" else state
        elif state == '"':
            if char == "\\":
                index += 1
            elif char == '"':
                state = ""
        elif char in SHELL_OPERATOR_CHARS:
            return f"shell operator {char!r} outside quotes"
        elif char == "#" and (index == 0 or command[index - 1] in " \t"):
            return "a comment ('#' starting a word)"
        elif char == "\\":
            following = command[index + 1 : index + 2]
            if following in SHELL_OPERATOR_CHARS and following:
                return f"shell operator {following!r} outside quotes"
            index += 1
        elif char in "'\"":
            state = char
        index += 1
    if state:
        return "an unclosed quote"
    return None


def _has_operator_token(command: str) -> bool:
    """A second opinion from shlex's own operator lexer (``punctuation_chars``)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        return True
    return any(token and set(token) <= SHELL_OPERATOR_CHARS for token in tokens)


def _argv_or_reason(command: str) -> tuple[tuple[str, ...], None] | tuple[None, str]:
    reason = _unsafe_reason(command)
    if reason is None and _has_operator_token(command):
        reason = "a shell operator"
    if reason is not None:
        return None, reason
    try:
        argv = tuple(shlex.split(command, posix=True))
    except ValueError as exc:
        return None, f"it cannot be split ({exc})"
    if not argv:
        return None, "it is empty"
    if _ASSIGNMENT.match(argv[0]):
        return None, f"it starts with an environment assignment ({argv[0].split('=')[0]}=)"
    return argv, None


def simple_argv(command: object) -> tuple[str, ...] | None:
    """The argv of ``command`` when it is one simple command with literal words, else None."""
    if not isinstance(command, str):
        return None
    argv, _reason = _argv_or_reason(command)
    return argv


def parse_prefix(prefix: object) -> tuple[str, ...]:
    """The argv of an ``allow_prefixes`` entry; :class:`CommandPrefixError` when it is unusable."""
    if not isinstance(prefix, str) or not prefix.strip():
        raise CommandPrefixError(f"allow_prefixes entry {prefix!r} must be a non-empty command")
    argv, reason = _argv_or_reason(prefix)
    if argv is None:
        raise CommandPrefixError(
            f"allow_prefixes entry {prefix!r} is not a plain command: {reason}"
        )
    for token in argv:
        bad = sorted(set(token) & _PREFIX_ONLY_REFUSED) or (["~"] if token[:1] == "~" else [])
        if bad:
            raise CommandPrefixError(
                f"allow_prefixes entry {prefix!r}: {bad[0]!r} in {token!r} means something "
                "to the shell (a glob, '~' or a comment); prefixes compare words literally"
            )
    return argv


def check_prefixes(prefixes: list[str]) -> list[str]:
    """``prefixes`` as given when every one is usable and there is at least one.

    Raises :class:`CommandPrefixError` naming the first bad entry.
    """
    if not prefixes:
        raise CommandPrefixError("allow_prefixes needs at least one command prefix")
    for prefix in prefixes:
        parse_prefix(prefix)
    return prefixes


def describe_prefixes(prefixes: Iterable[str]) -> str:
    """``allow_prefixes ["git status", "pytest -q"]``: the rule in one line for reviewers."""
    return "allow_prefixes [" + ", ".join(json.dumps(p, ensure_ascii=False) for p in prefixes) + "]"


def allowing_prefix(prefixes: Iterable[str], command: object) -> str | None:
    """The first prefix (as written) that allows ``command`` unasked, or None (it asks).

    An invalid prefix allows nothing (inputs validate them first, with
    :func:`parse_prefix`; this never raises for model input).
    """
    argv = simple_argv(command)
    if argv is None:
        return None
    for prefix in prefixes:
        try:
            words = parse_prefix(prefix)
        except CommandPrefixError:
            continue
        if argv[: len(words)] == words:
            return prefix
    return None


__all__ = [
    "EXPANSION_CHARS",
    "SHELL_OPERATOR_CHARS",
    "CommandPrefixError",
    "allowing_prefix",
    "check_prefixes",
    "describe_prefixes",
    "parse_prefix",
    "simple_argv",
]
