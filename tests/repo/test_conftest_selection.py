"""The server-free subset skips whole modules without importing them (tests/conftest.py).

Skipping a module must never drop a test the ``-m`` expression selects: only a
``not a and not b`` expression rules marks out, and only a module whose
``pytestmark`` carries one of them is skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import _dispatch_order, _module_marks, _ruled_out

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("expression", "ruled_out"),
    [
        ("not services and not slow", {"services", "slow"}),
        ("not slow", {"slow"}),
        ("  not services  ", {"services"}),
        ("services", set()),
        ("not services or slow", set()),
        ("slow and not services", set()),
        ("not (services and slow)", set()),
        ("", set()),
    ],
)
def test_only_a_conjunction_of_nots_rules_marks_out(expression: str, ruled_out: set[str]) -> None:
    assert _ruled_out(expression) == ruled_out


def test_module_marks_come_from_the_top_level_pytestmark_only(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text(
        "import pytest\n"
        "pytestmark = [pytest.mark.slow, pytest.mark.services]\n"
        "@pytest.mark.timing\n"
        "def test_a() -> None: ...\n"
    )
    assert _module_marks(module) == {"slow", "services"}
    module.write_text("import pytest\npytestmark = pytest.mark.services\n")
    assert _module_marks(module) == {"services"}
    module.write_text("import pytest\n@pytest.mark.slow\ndef test_a() -> None: ...\n")
    assert _module_marks(module) == set()
    module.write_text("def broken(:\n")
    assert _module_marks(module) == set()


class _Item:
    """Just enough of a pytest item for the dispatch order: its marks by name."""

    def __init__(self, name: str, *marks: pytest.MarkDecorator) -> None:
        self.name = name
        self.marks = {mark.mark.name: mark.mark for mark in marks}

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marks.get(name)


def test_xdist_hands_out_the_longest_slow_tests_first_and_timing_tests_last() -> None:
    items = [
        _Item("quick"),
        _Item("timed", pytest.mark.timing),
        _Item("plain"),
        _Item("slow-unsized", pytest.mark.slow),
        _Item("slow-40", pytest.mark.slow(seconds=40)),
        _Item("slow-130", pytest.mark.slow(seconds=130)),
        _Item("quick-2"),
    ]
    ordered = _dispatch_order(items)  # type: ignore[arg-type]
    # Each slow test is followed by a plain one: xdist hands a worker two at first.
    assert [item.name for item in ordered] == [
        "slow-130", "quick", "slow-40", "plain", "slow-unsized", "quick-2", "timed",
    ]  # fmt: skip
    fewer_plain = [_Item("slow-1", pytest.mark.slow), _Item("slow-2", pytest.mark.slow), _Item("q")]
    assert [item.name for item in _dispatch_order(fewer_plain)] == ["slow-1", "q", "slow-2"]  # type: ignore[arg-type]


@pytest.mark.slow
def test_an_xdist_worker_runs_its_tests_in_the_dispatch_order(tmp_path: Path) -> None:
    """The order is applied where xdist takes it from, a real worker's collection
    (the controller collects nothing, and a worker is not told ``-n``)."""
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
    )
    (tmp_path / "test_order.py").write_text(
        textwrap.dedent(
            """
            import os
            import pytest

            def ran(name):
                with open(os.environ["ORDER_LOG"], "a") as log:
                    log.write(name + "\\n")

            def test_quick():
                ran("quick")

            @pytest.mark.timing
            def test_timed():
                ran("timed")

            @pytest.mark.slow(seconds=40)
            def test_slow_40():
                ran("slow-40")

            @pytest.mark.slow(seconds=130)
            def test_slow_130():
                ran("slow-130")
            """
        )
    )
    log = tmp_path / "order.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(ROOT), ORDER_LOG=str(log))
    command = [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider"]
    ran = subprocess.run(
        [*command, "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert log.read_text().split() == ["slow-130", "quick", "slow-40", "timed"]
