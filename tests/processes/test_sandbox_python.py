"""``python`` inside the bwrap sandbox on a host that ships only ``python3`` (Debian).

Scripts and agents call ``python`` (langchain-tests' sandbox suite does), so
the sandbox links it to ``python3`` when the host has none; with a ``python``
of its own the host's is used and nothing is added. The host's own layout is
replaced here by patched candidate lists, so both cases run on any machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from filegate.backends import bwrap
from filegate.backends.bwrap import SHIM_BIN, BwrapSandboxBackend

pytestmark = pytest.mark.usefixtures("_bwrap_ok")


def test_python_runs_python3_when_the_host_has_no_python(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(bwrap, "_PYTHON", (str(tmp_path / "no-python"),))
    sandbox = BwrapSandboxBackend(tmp_path, check=False)
    assert sandbox.python_shim is not None
    assert sandbox.env["PATH"].endswith(f":{SHIM_BIN}")  # last: a real python wins
    target, link = sandbox.python_shim
    result = sandbox.execute(f"{link} -c 'import sys; print(sys.version_info[0])'; readlink {link}")
    assert result.exit_code == 0, result
    assert result.output.splitlines() == ["3", target]
    found = sandbox.execute("python -c 'print(42)'")  # whichever python PATH finds first
    assert (found.exit_code, found.output.strip()) == (0, "42"), found
    # The link lives on the sandbox's read-only root: a command cannot replace it.
    planted = sandbox.execute(f"ln -sf /bin/sh {SHIM_BIN}/python")
    assert planted.exit_code != 0


def test_nothing_is_added_when_the_host_has_a_python(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "python"
    fake.write_text("")
    monkeypatch.setattr(bwrap, "_PYTHON", (str(fake),))
    sandbox = BwrapSandboxBackend(tmp_path, check=False)
    assert sandbox.python_shim is None
    assert SHIM_BIN not in sandbox.env["PATH"]
    assert SHIM_BIN not in sandbox.bwrap_argv()
    assert not any(SHIM_BIN in arg for arg in sandbox.bwrap_argv())


def test_nothing_is_added_without_a_python3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(bwrap, "_PYTHON", (str(tmp_path / "no-python"),))
    monkeypatch.setattr(bwrap, "_PYTHON3", (str(tmp_path / "no-python3"),))
    assert bwrap._python_shim() is None


def test_a_path_of_ones_own_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(bwrap, "_PYTHON", (str(tmp_path / "no-python"),))
    sandbox = BwrapSandboxBackend(tmp_path, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert sandbox.env["PATH"] == "/usr/bin:/bin"
