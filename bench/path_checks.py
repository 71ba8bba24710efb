"""Count the argument and path checks one tool call costs, per side.

Run: ``python bench/path_checks.py`` (from the project root). Wraps the schema
check (``model_validate`` of the tool's argument model), ``validate_path``
(every module's imported name), ``to_virtual``, ``Router.resolve`` and the
error-message rewriters, then drives one ``read_file`` of a route
(``/memories/``) through:

- the workflow side: ``check_call`` and ``_order_key`` of ``workflows``;
- the activity side: the real ``FileToolActivities`` on a FilesystemBackend,
  via ``temporalio.testing.ActivityEnvironment`` (an existing and a missing file);
- in process: ``run_tool`` on a ``CompositeBackend`` with the same route.

``validate_path`` is reported as ``calls`` and ``real`` (the calls that had to
check a string, i.e. were not handed an already validated path). Prints one
table per scenario, the number of error-message string rewriters the code
still has (0 since errors carry ``error_path``: kernel.protocol), and a JSON
line.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from temporalio.testing import ActivityEnvironment  # noqa: E402

from filegate.activities.tools import FileToolActivities  # noqa: E402
from filegate.backends.composite import CompositeBackend  # noqa: E402
from filegate.backends.filesystem import FilesystemBackend  # noqa: E402
from filegate.kernel import dispatch, paths, routing  # noqa: E402
from filegate.kernel.dispatch import run_tool  # noqa: E402
from filegate.kernel.messages import ToolCall  # noqa: E402
from filegate.kernel.routing import Router  # noqa: E402
from filegate.kernel.tool_types import TOOL_ARGS, ToolRequest  # noqa: E402
from filegate.workflows.calls import ToolCalls  # noqa: E402
from filegate.workflows.gate import check_call  # noqa: E402

COUNTS: collections.Counter[str] = collections.Counter()

REWRITERS = ((routing, "map_message"), (dispatch, "_localise_message"), (dispatch, "_error_copy"))
"""Functions that used to rewrite backend-local paths inside error text."""


def string_rewriters() -> int:
    """How many of :data:`REWRITERS` still exist (the target is 0)."""
    return sum(hasattr(module, name) for module, name in REWRITERS)


def _counted(name: str, fn: Callable[..., Any], real: Callable[..., bool] | None = None) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        COUNTS[name] += 1
        if real is not None and real(*args, **kwargs):
            COUNTS[name + " (real)"] += 1
        return fn(*args, **kwargs)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _is_real_path_check(path: Any = None, *_: Any, **__: Any) -> bool:
    valid = getattr(paths, "ValidPath", None)
    return valid is None or not isinstance(path, valid)


def _patch_everywhere(name: str, original: Any, replacement: Any) -> None:
    for module in list(sys.modules.values()):
        if (module.__name__ or "").startswith("filegate") and getattr(
            module, name, None
        ) is original:
            setattr(module, name, replacement)


def install() -> None:
    _patch_everywhere(
        "validate_path",
        paths.validate_path,
        _counted("validate_path", paths.validate_path, _is_real_path_check),
    )
    visibility = sys.modules["filegate.kernel.visibility"]
    _patch_everywhere(
        "to_virtual", visibility.to_virtual, _counted("to_virtual", visibility.to_virtual)
    )
    for module, rewriter in REWRITERS:
        if hasattr(module, rewriter):
            original = getattr(module, rewriter)
            _patch_everywhere(rewriter, original, _counted(rewriter, original))
    Router.resolve = _counted("Router.resolve", Router.resolve)  # type: ignore[method-assign]
    for model in set(TOOL_ARGS.values()):
        original = model.model_validate
        model.model_validate = _counted("schema check", original)  # type: ignore[method-assign]


@contextmanager
def measure(label: str, results: dict[str, dict[str, int]]) -> Iterator[None]:
    COUNTS.clear()
    yield
    results[label] = dict(sorted(COUNTS.items()))


def _request(local: dict[str, Any], virtual: str, prefix: str, call_id: str) -> ToolRequest:
    """The request the workflow's ``_request`` builds (virtual path when the field exists)."""
    extra: dict[str, Any] = {}
    if "virtual_path" in ToolRequest.model_fields:
        extra["virtual_path"] = virtual
    return ToolRequest(
        tool="read_file",
        backend="mem",
        args=local,
        tool_call_id=call_id,
        route_prefix=prefix,
        **extra,
    )


async def main() -> None:
    install()
    results: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        default_root = Path(tmp, "default")
        memories_root = Path(tmp, "memories")
        default_root.mkdir()
        memories_root.mkdir()
        (memories_root / "notes.md").write_text("alpha\nbeta\n")
        router = Router(["/memories/"])
        call = ToolCall(id="c1", name="read_file", args={"file_path": "/memories/notes.md"})

        with measure("workflow: order key + check_call", results):
            checked = check_call(
                call.name,
                call.args,
                allowed=list(TOOL_ARGS),
                router=router,
                max_args_chars=100_000,
                max_execute_timeout=600.0,
            )
            ToolCalls._order_key(checked)  # orders on the checked call's path
        assert not hasattr(checked, "is_error"), checked

        tools = FileToolActivities(
            {"mem": FilesystemBackend(memories_root)}, Path(tmp, "journal"), search_timeout=10.0
        )
        env = ActivityEnvironment()
        request = _request({"file_path": "/notes.md"}, "/memories/notes.md", "/memories/", "1:0:c1")
        with measure("activity: read_file", results):
            out = await env.run(tools.read_file, request)
        assert out.status == "success", out
        missing = _request({"file_path": "/nope.md"}, "/memories/nope.md", "/memories/", "1:1:c2")
        with measure("activity: read_file (missing)", results):
            out = await env.run(tools.read_file, missing)
        assert "/memories/nope.md" in str(out.content), out

        composite = CompositeBackend(
            FilesystemBackend(default_root), {"/memories/": FilesystemBackend(memories_root)}
        )
        in_process = ToolRequest(
            tool="read_file",
            backend="composite",
            args={"file_path": "/memories/nope.md"},
            tool_call_id="1:2:c3",
        )
        with measure("composite: run_tool read_file (missing)", results):
            out = run_tool(composite, in_process)
        assert "/memories/nope.md" in str(out.content), out
        in_process = in_process.model_copy(update={"args": {"file_path": "/memories/notes.md"}})
        with measure("composite: run_tool read_file", results):
            out = run_tool(composite, in_process)
        assert out.status == "success", out

    for label, counts in results.items():
        print(label)
        for name, count in counts.items():
            print(f"  {name:28} {count}")
    rewriters = string_rewriters()
    print(f"string rewriters: {rewriters}")
    print(json.dumps({**results, "string rewriters": rewriters}))


if __name__ == "__main__":
    asyncio.run(main())
