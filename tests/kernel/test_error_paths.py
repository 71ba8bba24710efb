"""Structured error paths (issue 14): errors name virtual paths without rewriting text.

Backends put the path an error is about in ``error_path`` and keep it out of
``error``; the dispatcher and the router map that field like any other path,
and the renderer composes the text once. The old string replacement mangled
messages whose other parts (a quoted pattern, a file named like the prefix)
contained the local path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from filegate.backends.composite import CompositeBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.dispatch import parse_args, run_tool
from filegate.kernel.protocol import ReadResult
from filegate.kernel.routing import Router
from filegate.kernel.state import StateBackend
from filegate.kernel.tool_types import RawListing, ToolName, ToolOutcome, ToolRequest
from filegate.workflows.fanout import fan_out


def _request(tool: ToolName, args: dict[str, Any], prefix: str, virtual: str | None) -> ToolRequest:
    return ToolRequest(
        tool=tool,
        backend="b",
        args=args,
        tool_call_id="c",
        route_prefix=prefix,
        virtual_path=virtual,
    )


def test_a_pattern_quoted_in_an_error_at_a_route_root_stays_exact() -> None:
    # Local path "/" of route /m/: the old replacement turned every "/" of the
    # message into "/m", including the ones of the quoted glob.
    request = _request("grep", {"pattern": "x", "path": "/", "glob": "src/../x"}, "/m/", "/m")
    out = run_tool(StateBackend(), request)
    assert out.status == "error"
    assert "'src/../x'" in str(out.content), out.content


def test_a_file_named_like_the_prefix_is_shown_under_the_route() -> None:
    composite = CompositeBackend(StateBackend(), {"/m/": StateBackend()})
    assert composite.write("/m/m", "a file, not a directory\n").ok
    write = _request("write_file", {"file_path": "/m/m/x", "content": "y"}, "/", None)
    out = run_tool(composite, write)
    # Old text: "cannot create /m/m/x: /m is a file" (naming the route root, not the file).
    assert out.content == "Error: /m/m: is a file, so nothing can be created below it"


def test_dispatch_maps_the_error_path_and_keeps_the_reason(tmp_path: Path) -> None:
    (tmp_path / "m").write_text("one line\n")
    request = _request("read_file", {"file_path": "/m", "offset": 5}, "/m/", "/m/m")
    out = run_tool(FilesystemBackend(tmp_path), request)
    assert out.status == "error"
    assert out.content == (
        "Error: /m/m: offset 5 is past the end of the file (1 lines); use an offset below 1"
    )


class _ThirdParty(StateBackend):
    """A backend that writes its own local path into ``error`` (no ``error_path``)."""

    def read(self, path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return ReadResult(path=path, error=f"cannot open {path}", code="io_error")


def test_a_backend_without_error_path_is_shown_as_is() -> None:
    request = _request("read_file", {"file_path": "/a"}, "/m/", "/m/a")
    out = run_tool(_ThirdParty(), request)
    assert out.content == "Error: cannot open /a"  # documented fallback: no rewriting


def test_router_maps_error_paths_of_a_route_root() -> None:
    router = Router(["/m/"])
    failed = ReadResult(error="directory not found", code="file_not_found", error_path="/")
    assert router.virtual_error(failed, "/m/").error_text == "/m: directory not found"
    assert router.virtual_error(failed, None).error_text == "/: directory not found"
    assert ReadResult(error="why", code="io_error").error_text == "why"


def test_fan_out_targets_carry_their_virtual_path() -> None:
    router = Router(["/m/", "/m/deep/"])
    seen: list[ToolRequest] = []

    async def run(prefix: str | None, args: dict[str, Any], virtual_path: str) -> ToolOutcome:
        request = _request("glob", args, prefix or "/", virtual_path)
        parse_args(request)  # the activity's one path check accepts it
        seen.append(request)
        return ToolOutcome(content="0 paths", raw=RawListing(glob=StateBackend().glob("*")))

    asyncio.run(fan_out(router, "glob", {"pattern": "*.md", "path": "/m"}, run))
    assert sorted(str(r.virtual_path) for r in seen) == ["/m", "/m/deep"]
