"""The environment is read at the edges only: the CLI and the plugin's defaults.

Why: a library class that falls back to ``Settings.from_env()`` ignores the
values its caller gave (``FilegatePlugin(settings=...)`` with the journal's fsync on
once did not fsync unless ``FILEGATE_JOURNAL_FSYNC`` was also set), and a
worker built in a test or a user's program changes behaviour with whatever
the shell exported. Constructors take typed values; the places that may read
the environment are listed here, each with its reason, and a new one fails
this test until it is listed (or moved to an edge).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EDGES = ("cli/", "plugin.py")
"""Where configuration is read from the environment: the command line and the
plugin's defaults."""

READERS = {
    "backends/settings.py": "Settings.from_env itself",
    "backends/policy/config.py": "PolicyConfig.from_env itself",
    "backends/local_shell.py": "the command's own environment (inherit_env), not configuration",
    "devstack/servers.py": "the dev server child's environment, minus credentials",
    "activities/providers/common.py": "a model profile's API key, read by the variable it names",
    "activities/idempotency.py": "the crash tests' fault hooks (a tool call id to stall on)",
    "integrations/environment.py": "the adapters' default path (an adapter is an edge)",
}
"""Library modules that touch ``os.environ`` for a reason other than configuration."""


def _library_modules() -> list[Path]:
    skip = {"tests", "bench", "build", ".venv", ".git", "docs", "deploy"}
    return sorted(p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts[:1]))


def _env_reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("environ", "getenv")
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append(f"os.{node.attr} (line {node.lineno})")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "from_env"
        ):
            found.append(f"from_env() (line {node.lineno})")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in ("environ", "getenv") for alias in node.names)
        ):
            found.append(f"from os import environ (line {node.lineno})")
    return found


def _offenders(root: Path) -> dict[str, list[str]]:
    offenders = {}
    for path in _library_modules() if root == ROOT else sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(EDGES) or name in READERS:
            continue
        reads = _env_reads(ast.parse(path.read_text(), str(path)))
        if reads:
            offenders[name] = reads
    return offenders


@pytest.mark.slow
def test_the_library_reads_no_configuration_from_the_environment() -> None:
    offenders = _offenders(ROOT)
    assert not offenders, (
        "read these values at an edge (the CLI, FilegatePlugin's defaults) and pass them "
        f"in, or list the module in READERS with its reason: {offenders}"
    )


def test_every_listed_reader_still_reads() -> None:
    """A listed exception that no longer reads the environment is dropped from the list."""
    for name in READERS:
        assert _env_reads(ast.parse((ROOT / name).read_text())), name


@pytest.mark.parametrize(
    "planted",
    [
        "from filegate.backends.settings import Settings\nS = Settings.from_env()\n",
        "import os\nFSYNC = os.environ.get('FILEGATE_JOURNAL_FSYNC')\n",
        "import os\nFSYNC = os.getenv('FILEGATE_JOURNAL_FSYNC')\n",
        "from os import environ\n",
    ],
)
def test_a_planted_read_is_found(tmp_path: Path, planted: str) -> None:
    (tmp_path / "activities").mkdir()
    (tmp_path / "activities" / "planted.py").write_text(planted)
    assert list(_offenders(tmp_path)) == ["activities/planted.py"]
