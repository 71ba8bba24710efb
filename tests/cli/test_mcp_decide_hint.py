"""The decline message of ``filegate mcp`` names a command that works (issue 54).

Over stdio with the embedded stack (every client configuration in
docs/mcp.md), the old message said ``filegate approve --workflow W ID``,
which cannot connect (the stack's Temporal is on a port of its own, and gone
once the process exits). The message now gives the address while the server
runs and, for after, serving the session again; with a deployment, the plain
command. No S3 key is in it: the MCP client, a model, reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp")

from filegate.cli.mcp import _decide_hint
from filegate.cli.mcp_gate import McpGate


def _declined(hint: str) -> str:
    gate = McpGate(None, "wf-1", reviewer="r", decide_hint=hint)  # type: ignore[arg-type]
    result = gate._unasked({"id": "abc123", "tool": "write_file"}, "the client declined")
    return "".join(getattr(block, "text", "") for block in result.content)


def test_the_embedded_stack_gets_its_address_and_the_way_back() -> None:
    text = _declined(_decide_hint("wf-1", "127.0.0.1:17999", Path("/home/u/ws")))
    assert "`TEMPORAL_ADDRESS=127.0.0.1:17999 filegate approve --workflow wf-1 abc123`" in text
    assert "`filegate mcp --root /home/u/ws --workflow-id wf-1`" in text
    assert "SECRET" not in text.upper() and "ACCESS_KEY" not in text


def test_a_deployment_gets_the_plain_command() -> None:
    text = _declined(_decide_hint("wf-1", None, None))
    assert "`filegate approve --workflow wf-1 abc123`" in text
    assert "TEMPORAL_ADDRESS" not in text
