"""Property test: a rule set that compiles holds for every command in the sandbox.

Random rule sets (over literal paths and ``dir/**`` subtrees of a planted
workspace, with planted symlinks) are compiled into the bubblewrap view, and a
random batch of hostile probes runs in it. After each example:

- no output holds a byte of a file whose read is denied or interrupted;
- no path whose write is denied or interrupted changed (existence, kind,
  content, link target, mode), whatever the probes tried;
- every file no compiled mount covers stayed readable and writable, and new
  files can be made next to it;
- or, when the view cannot hold a rule (a write rule through the planted link
  ``ln_d1``, which a command could re-point), every command is refused in one
  line naming a rule, and nothing in the workspace changed.

Every file's content is a unique token, so "a byte of it" is checkable.
"""

from __future__ import annotations

import os
import shlex
import stat
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.execute_gate import SandboxView, compile_view
from filegate.kernel.permissions import FilesystemPermission, first_match

pytestmark = pytest.mark.slow

FILES = (
    "top.txt",
    ".env",
    "d0/f0.txt",
    "d0/s/f1.txt",
    "d0/s/.hid",
    "d1/f2.txt",
    "d1/deep/x/f3.txt",
    "d2/f4.txt",
)
LINKS = {"d2/to_f1": "../d0/s/f1.txt", "ln_d1": "d1"}
RULE_PATHS = (
    "/top.txt",
    "/.env",
    "/d0",
    "/d0/**",
    "/d0/s/**",
    "/d0/s/f1.txt",
    "/d1/**",
    "/d1/deep/**",
    "/d2/**",
    "/d2/new.txt",
    "/missing/**",
    "/ln_d1/**",
    "/{d0,d2}/**",
    "/**",
)
TARGETS = (
    "top.txt .env d0 d1 d2 d0/s d0/s/f1.txt d0/f0.txt d1/deep d1/f2.txt d2/f4.txt ln_d1 d2/to_f1"
)
WALKER = (
    "import os\n"
    "for base, dirs, files in os.walk('.'):\n"
    "    for name in files:\n"
    "        p = os.path.join(base, name)\n"
    "        try: print(open(p).read())\n"
    "        except OSError as e: print('ERR', e)\n"
    "        try: open(p, 'a').write('pwn')\n"
    "        except OSError as e: print('ERR', e)\n"
    "    try: open(os.path.join(base, 'made-by-walker'), 'w').write('w')\n"
    "    except OSError as e: print('ERR', e)\n"
)
PROBES = (
    "cat " + " ".join(FILES) + " d2/to_f1 ln_d1/f2.txt",
    "ls -laR .",
    "find . -type f -exec cat {} +",
    "cp -r . /tmp/copy; find /tmp/copy -type f -exec cat {} +",
    f"for p in {TARGETS}; do mv $p $p.moved; done",
    "ln -s d0/s sl; cat sl/f1.txt; echo pwn > sl/f1.txt; ln -s ../secrets d1/up",
    "ln -sf top.txt d2/f4.txt; ln -sf ../top.txt d0/f0.txt",
    f"rm -rf {TARGETS}",
    "touch top.txt d0/new d0/s/new d1/deep/new d2/new.txt missing/new; mkdir -p missing/x",
    "chmod 000 top.txt d0/f0.txt d0/s/f1.txt d1/f2.txt; chmod 777 d0 d1/deep",
    "for f in " + " ".join(FILES) + "; do echo pwn > $f; echo pwn >> $f; done",
    "exec python3 -c " + shlex.quote(WALKER),
)

rules_strategy = st.lists(
    st.builds(
        FilesystemPermission,
        operations=st.sampled_from([["read"], ["write"], ["read", "write"]]),
        paths=st.lists(st.sampled_from(RULE_PATHS), min_size=1, max_size=2, unique=True),
        mode=st.sampled_from(["deny", "interrupt", "allow"]),
    ),
    min_size=1,
    max_size=4,
)


def plant(root: Path) -> dict[str, str]:
    tokens = {}
    for rel in FILES:
        token = f"TOKEN-{uuid.uuid4().hex}"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(token)
        tokens[rel] = token
    for rel, target in LINKS.items():
        (root / rel).symlink_to(target)
    return tokens


def snapshot(root: Path) -> dict[str, tuple[str, str, int]]:
    """Every path below ``root``: kind, content or link target, mode bits (not followed)."""
    seen: dict[str, tuple[str, str, int]] = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(base) / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                seen[rel] = ("link", os.readlink(path), 0)
            elif stat.S_ISDIR(info.st_mode):
                seen[rel] = ("dir", "", mode)
            else:
                seen[rel] = ("file", _content(path, mode), mode)
    return seen


def _content(path: Path, mode: int) -> str:
    """The file's text, also when a probe took away its read bit (root reads it
    anyway; the owner lends itself the bit for the read and gives it back)."""
    if os.access(path, os.R_OK):
        return path.read_bytes().decode("utf-8", "replace")
    os.chmod(path, mode | stat.S_IRUSR)
    try:
        return path.read_bytes().decode("utf-8", "replace")
    finally:
        os.chmod(path, mode)


def protected(rules: list[FilesystemPermission], op: str, rel: str) -> bool:
    rule = first_match(rules, op, "/" + rel)  # type: ignore[arg-type]
    return rule is not None and rule.mode != "allow"


def untouched(root: Path, view: SandboxView, rel: str) -> bool:
    """Whether no compiled mount covers ``rel`` (compared on resolved host paths)."""
    real = os.path.realpath(root / rel)
    for entry in view.protected:
        covered = os.path.realpath(root / entry.path.lstrip("/"))
        if real == covered or real.startswith(covered.rstrip("/") + "/"):
            return False
    return True


@pytest.fixture(scope="module")
def sandbox_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    BwrapSandboxBackend(tmp_path_factory.mktemp("probe"), check=True)
    return tmp_path_factory.mktemp("views")


@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rules=rules_strategy, probes=st.lists(st.sampled_from(PROBES), min_size=1, max_size=3))
@pytest.mark.slow(seconds=45)
def test_no_probe_gets_past_a_compiled_view(
    sandbox_root: Path, rules: list[FilesystemPermission], probes: list[str]
) -> None:
    root = sandbox_root / uuid.uuid4().hex
    root.mkdir()
    tokens = plant(root)
    view = compile_view(rules)
    box = BwrapSandboxBackend(root, check=False)

    before = snapshot(root)
    first = box.execute_in_view("true", 30, view)
    if first.error is not None and first.error.startswith("execute refused: "):
        assert "\n" not in first.error and "permission rule " in first.error, first.error
        assert any(p.startswith("/ln_d1") for r in rules for p in r.paths), first.error
        refused = box.execute_in_view("; ".join(probes), 30, view)
        assert refused.error == first.error and refused.exit_code is None
        assert snapshot(root) == before, (rules, probes)
        return
    assert first.exit_code == 0, (rules, first.output, first.error)

    allowed = [rel for rel in FILES if untouched(root, view, rel)]
    if allowed:
        check = "; ".join(
            f"cat {rel} && echo >> {rel} && touch {os.path.dirname(rel) or '.'}/new-{i}"
            for i, rel in enumerate(allowed)
        )
        result = box.execute_in_view(check, 30, view)
        assert result.exit_code == 0, (rules, result.output)
        for rel in allowed:
            assert tokens[rel] in result.output
            assert (root / rel).read_text() == tokens[rel] + "\n"

    before = snapshot(root)
    result = box.execute_in_view("; ".join(probes), 30, view)
    after = snapshot(root)

    output = result.output + (result.error or "")
    for rel, token in tokens.items():
        if protected(rules, "read", rel):
            assert token not in output, (rules, probes, rel)
    for rel in set(before) | set(after):
        if protected(rules, "write", rel):
            assert before.get(rel) == after.get(rel), (rules, probes, rel)
