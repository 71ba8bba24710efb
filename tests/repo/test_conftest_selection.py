"""The server-free subset skips whole modules without importing them (tests/conftest.py).

Skipping a module must never drop a test the ``-m`` expression selects: only a
``not a and not b`` expression rules marks out, and only a module whose
``pytestmark`` carries one of them is skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import _dispatch_rank, _module_marks, _ruled_out


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
    ordered = sorted(items, key=_dispatch_rank)  # type: ignore[arg-type]
    assert [item.name for item in ordered] == [
        "slow-130", "slow-40", "slow-unsized", "quick", "plain", "quick-2", "timed",
    ]  # fmt: skip
