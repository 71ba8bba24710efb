"""The code's own rules, checked by tools: lint, format, complexity, types, layers, import cost.

The layers (docs/architecture.md) hold because import-linter checks them on
every run, not by discipline; a planted violation proves the check can fail.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PACKAGE_DIRS = (
    "kernel",
    "processes",
    "backends",
    "devstack",
    "activities",
    "workflows",
    "wiring",
    "cli",
    "integrations",
)
"""The repository's package folders; with the root's own modules they are ``filegate``."""


def _run(*argv: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _sources() -> list[Path]:
    """Every Python file of ours: the package, its tests and benches."""
    skip = {".venv", "build", ".git"}
    return sorted(p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts))


def test_ruff_lint_and_format_are_clean() -> None:
    _run(BIN / "ruff", "check", ".")
    _run(BIN / "ruff", "format", "--check", ".")


@pytest.mark.slow(seconds=75)
def test_mypy_is_clean(tmp_path: Path) -> None:
    """mypy sees the package under its installed name through a ``filegate`` link to the root.

    (The root *is* the package; mypy cannot follow setuptools' editable finder.)
    The three runs share one cache in the temp dir: the tests and benches see the
    package's modules and the third-party stubs at the same paths, so only the
    first run analyses them (about 60 s of the 145 s three cold runs took), and
    nothing is written into the checkout.
    """
    (tmp_path / "filegate").symlink_to(ROOT, target_is_directory=True)
    mypy = (
        BIN / "mypy",
        "--config-file",
        ROOT / "pyproject.toml",
        "--cache-dir",
        tmp_path / "cache",
    )
    exclude = r"^filegate/(tests|bench|docs|build)/"
    _run(*mypy, "--exclude", exclude, "-p", "filegate", cwd=tmp_path)
    env = {**os.environ, "MYPYPATH": str(tmp_path)}
    _run(*mypy, "tests", env=env)
    env["MYPYPATH"] = f"{tmp_path}{os.pathsep}{ROOT / 'bench'}"
    _run(*mypy, *sorted(str(p) for p in (ROOT / "bench").glob("*.py")), env=env)


def test_import_contracts_hold() -> None:
    out = _run(BIN / "lint-imports", "--config", ROOT / ".importlinter")
    assert "broken" not in out.lower().replace("0 broken", ""), out


def test_import_contracts_fail_on_a_planted_violation(tmp_path: Path) -> None:
    """A copy of the package whose kernel imports a backend, and whose adapter imports
    the wiring internals instead of the plugin, must break the contracts."""
    copy = tmp_path / "filegate"
    copy.mkdir()
    for module in ROOT.glob("*.py"):
        shutil.copy(module, copy / module.name)
    for folder in PACKAGE_DIRS:
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("*.pyc"))
    (copy / "kernel" / "planted.py").write_text("from filegate.backends import filesystem\n")
    (copy / "integrations" / "planted.py").write_text("from filegate.worker import tools_worker\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [str(BIN / "lint-imports"), "--config", str(ROOT / ".importlinter")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    assert "filegate.kernel.planted -> filegate.backends" in done.stdout, done.stdout
    assert "filegate.integrations.planted -> filegate.worker" in done.stdout, done.stdout


def test_importing_the_kernel_loads_neither_minio_nor_the_temporal_worker() -> None:
    kernel = sorted(
        f"filegate.kernel.{p.stem}" for p in (ROOT / "kernel").glob("*.py") if p.stem != "__init__"
    )
    code = (
        "import sys\n"
        f"for name in {kernel!r}: __import__(name)\n"
        "heavy = ('minio', 'temporalio.worker', 'temporalio.client', 'urllib3', 'av', 'PIL')\n"
        "print([m for m in heavy if m in sys.modules], len(sys.modules))\n"
    )
    out = _run(sys.executable, "-c", code, cwd=Path("/"))
    loaded, _, count = out.strip().rpartition(" ")
    assert loaded.strip() == "[]", out
    assert int(count) < 300, f"the kernel pulled in {count} modules"


def test_a_function_past_the_complexity_limits_is_refused(tmp_path: Path) -> None:
    """The project's ruff settings bound a function's complexity (not a module's
    length, which split concepts across files to fit); a planted function over
    the limits proves the rules are on."""
    cases = "\n".join(f"    if x == {n}:\n        return {n}" for n in range(20))
    planted = tmp_path / "planted.py"
    planted.write_text(f"def tangled(x: int) -> int:\n{cases}\n    return -1\n")
    done = subprocess.run(
        [BIN / "ruff", "check", "--config", ROOT / "pyproject.toml", "--no-cache", planted],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "C901" in done.stdout and "PLR0912" in done.stdout, done.stdout


@pytest.mark.slow
def test_every_import_of_ours_goes_through_filegate() -> None:
    """A top-level ``import backends`` would work in the repo and fail once installed."""
    ours = {"kernel", "processes", "backends", "devstack", "activities", "workflows", "worker"}
    ours |= {"operations", "cli"}
    wrong: list[str] = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in ours:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not wrong, wrong
