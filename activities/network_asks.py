"""The tools worker's side of a network question: ask the run, wait, answer the proxy.

A sandboxed command's connection that an ``interrupt`` network rule holds is
put to the run that called ``execute``, as the ``ask_network`` update
(``workflows/approvals/network_asks.py``), from the proxy's thread through
the activity's own event loop. Its id is the call's id with the host and
port, so a command run again after a worker crash asks the same question,
and Temporal answers it with the decision already made (or attaches it to
the wait still open): nothing is asked twice. The wait ends with the
command: a question still open then is a refusal for the connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from temporalio import activity

from filegate.backends.sandbox_network import Asker, HostAnswer, HostQuestion
from filegate.kernel import wire
from filegate.kernel.network_rules import NetworkAnswer, NetworkAsk, host_port
from filegate.kernel.registry import TOOLS
from filegate.kernel.tool_types import ToolRequest

POLL_SECONDS = 0.5
"""How often a waiting question checks whether its command ended."""


def run_asker(request: ToolRequest) -> Asker | None:
    """The asker of this activity's run, when its ``execute`` has ``interrupt``
    network rules and runs in a workflow (call in the activity, on its loop)."""
    if request.tool not in TOOLS.running or not any(r.mode == "interrupt" for r in request.network):
        return None
    info = activity.info()
    if not info.in_workflow or not info.workflow_id:
        return None
    handle = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    loop = asyncio.get_running_loop()
    command = str(request.args.get("command", ""))[:4000]

    def ask(question: HostQuestion, ended: threading.Event) -> HostAnswer:
        asked = NetworkAsk(
            host=question.host, port=question.port, tool_call_id=request.tool_call_id,
            command=command,
        )  # fmt: skip
        where = host_port(question.host, question.port)
        update_id = f"{wire.NETWORK_ASK_UPDATE}:{request.tool_call_id}:{where}"

        async def asking() -> NetworkAnswer | BaseException:
            # Every ending is returned, none raised: a question given up when the
            # command ends is cancelled, and that is no error to log.
            try:
                answer: NetworkAnswer = await handle.execute_update(
                    wire.NETWORK_ASK_UPDATE, asked, id=update_id, result_type=NetworkAnswer
                )
            except BaseException as exc:
                return exc
            return answer

        future = asyncio.run_coroutine_threadsafe(asking(), loop)
        while True:
            try:
                answer = future.result(timeout=POLL_SECONDS)
                break
            except concurrent.futures.TimeoutError:
                if ended.is_set():
                    future.cancel()
                    late = f"{question.reason}: no decision before the command ended"
                    return HostAnswer(False, late)
            except concurrent.futures.CancelledError:  # the activity itself is ending
                return HostAnswer(False, f"{question.reason}: the command was stopped")
        if isinstance(answer, BaseException):  # the run could not be asked: no connection
            return HostAnswer(False, f"{question.reason}: the run could not be asked ({answer})")
        return HostAnswer(answer.allowed, answer.reason)

    return ask


__all__ = ["run_asker"]
