"""Reads the rules alone allow, answered in the ``filegate mcp --root`` process (issue 55).

Why: every MCP call went the long way round, an update to the session
workflow, a workflow task, a local activity, the update's answer: 17-20 ms
for a 4 KB ``read_file`` that the reference filesystem server answers in
under 1 ms. A read that no person, reviewer or grant has a say in (the rules
allow it, no ``interrupt`` matches, no ``interrupt_on`` entry) needs none of
that durability: nothing waits, nothing changes, a retry is harmless.

So where this process serves the backend itself (``--root``), such a read is
answered here, through the same pieces the tools activity uses (the worker's
policies around the backend, its audit line under the session's run chain,
the kernel's tool path), and the session is told afterwards with the
``noted`` signal. The session books it as if it had run there (the path
counts as read for read-before-edit, its fingerprint for stale writes), after
checking the read the same way (:meth:`FileTools.noted`): both sides ask one
question, :meth:`~filegate.workflows.calls.Routes.answered_unasked`. Every
other call, and a read of an offloaded result (``/large_tool_results/``, kept
in S3), keeps its durable path; a deployment's session (no ``--root``) has no
backend in this process and sends every call.
"""

from __future__ import annotations

from collections.abc import Mapping

from filegate.activities.tools import answer_here
from filegate.backends.policy import PolicyConfig
from filegate.kernel.artifacts import chain_scope
from filegate.kernel.messages import ToolCall
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.tool_types import ToolOutcome, activity_call_id
from filegate.workflows.calls import Routes
from filegate.workflows.gate import CheckedCall
from filegate.workflows.inputs import FileToolsConfig, FileToolsState

FAST_STEP = 0
"""The step in a fast read's activity call id: the workflow numbers its steps from 1,
so these ids never meet one of a call the session ran."""


class FastReads:
    """The session's rules and this process's backends, for reads answered here."""

    def __init__(
        self,
        config: FileToolsConfig,
        backends: Mapping[str, BackendProtocol],
        policies: PolicyConfig | None = None,
    ) -> None:
        """``backends``: those this process's tools worker serves, by the session's names;
        ``policies``: that worker's (the same object, so the same audit file)."""
        self._config = config
        self._routes = Routes(config, FileToolsState(), None, False)
        self._backends = dict(backends)
        self._policies = policies if policies is not None else PolicyConfig()

    def eligible(self, call: ToolCall) -> CheckedCall | None:
        """``call`` checked, when it is a read this process may answer; else None."""
        checked = self._routes.answered_unasked(call.name, call.args)
        if checked is None:
            return None
        ref = self._config.backend.backend_for(checked.prefix)
        if ref.kind != "remote" or ref.name not in self._backends:
            return None
        return checked

    def answer(
        self, checked: CheckedCall, call: ToolCall, workflow_id: str, first_run_id: str
    ) -> ToolOutcome | None:
        """The read's outcome, as the tools activity would answer it; None when it must
        go the long way (an offloaded result). Blocking: run it off the event loop."""
        request = self._routes.exact_request(
            checked, activity_call_id(FAST_STEP, 0, call.id), first_run_id=first_run_id
        )
        backend = self._backends[request.backend]
        scope = chain_scope(workflow_id, first_run_id)
        return answer_here(backend, self._policies, request, scope)


__all__ = ["FastReads"]
