"""Every command line and ``--interrupt-on`` example of docs/cli.md parses (issue 34 item 7).

The docs showed an ``--interrupt-on`` file the parser refuses. Here each
``bash`` block's command lines go through the real argument parser (a synopsis
line as its shortest form: optional ``[...]`` groups left out, the first of
``a|b`` alternatives taken, and every ``--flag`` it names known to that
command), and each JSON object the ``--interrupt-on`` paragraph shows loads
as an interrupt_on file.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from filegate.cli.commands import build_parser
from filegate.cli.run_inputs import load_interrupt_on

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def bash_lines(text: str) -> list[str]:
    """The ``filegate ...`` command lines of the ``bash`` blocks, continuations joined,
    comments dropped."""
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith("filegate "):
                lines.append(line)
    return lines


def shortest(line: str) -> str:
    """A synopsis line without its optional groups, first alternatives taken."""
    while True:
        fewer = re.sub(r"\[[^\[\]]*\]", "", line)
        if fewer == line:
            break
        line = fewer
    line = re.sub(r"\(([^()|]*)\|[^()]*\)", r"\1", line)
    line = re.sub(r"(?<=\s)(\S+?)\|\S+", r"\1", line)
    return line.replace("...", "")


EXAMPLES = bash_lines(CLI_MD.read_text())


def test_the_docs_have_command_lines() -> None:
    assert len(EXAMPLES) >= 30, EXAMPLES
    assert any("--interrupt-on" in line for line in EXAMPLES)


PLACEHOLDERS = {"TOOL": "read_file"}
"""Synopsis placeholders the parser checks against a list of choices."""


def deepest(words: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser that takes the options after ``words``' command names."""
    parser = build_parser()
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return parser


@pytest.mark.parametrize("line", EXAMPLES)
def test_every_command_line_parses(line: str) -> None:
    words = [PLACEHOLDERS.get(w, w) for w in shlex.split(shortest(line))[1:]]
    if words and words[0].startswith("--role"):  # `filegate --role ...` is `worker`
        words.insert(0, "worker")
    try:
        build_parser().parse_args(words)
    except SystemExit as exc:
        raise AssertionError(f"the parser refuses: {shortest(line)}") from exc
    known = set(deepest(words)._option_string_actions) | {"--verbose"}
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line))
    assert named <= known, f"unknown flags {named - known} in: {line}"


def interrupt_on_examples(text: str) -> list[str]:
    """The inline JSON objects of the ``--interrupt-on`` paragraph."""
    start = text.index("**`--interrupt-on`**")
    paragraph = text[start : text.index("\n- ", start)]
    return [
        snippet
        for snippet in re.findall(r"`(\{.*?\})`", paragraph, flags=re.S)
        if snippet.startswith("{")
    ]


def test_every_interrupt_on_example_loads(tmp_path: Path) -> None:
    examples = interrupt_on_examples(CLI_MD.read_text())
    assert len(examples) >= 3, examples
    for n, snippet in enumerate(examples):
        text = re.sub(r"\s+", " ", snippet)
        path = tmp_path / f"i{n}.json"
        path.write_text(json.dumps(json.loads(text)))
        assert load_interrupt_on(str(path)), text
