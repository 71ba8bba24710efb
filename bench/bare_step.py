"""One agent step in the bare SDK, no Filegate code: what ``agent_step.py``'s ratios divide by.

A step is the shape of Filegate's: a model call as a local activity, then a
read of the same 20 KB file, either as a second local activity (the shape of
Filegate's ``local`` step) or as a regular activity on another task queue
served by another worker (its ``remote`` step). The "model" answers the path
to read; the read returns the file's text. Nothing else: no gate, no
conversions beyond the SDK's, no bookkeeping. Its own module so the workflow
sandbox imports only this.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow


class BareInput(BaseModel):
    steps: int
    path: str
    tool_queue: str | None = None
    """None: the read is a local activity; else a regular activity on this queue."""


@activity.defn(name="bare.model")
async def bare_model(path: str) -> str:
    return path


@activity.defn(name="bare.read")
def bare_read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


@workflow.defn(name="bare.Step")
class BareStep:
    @workflow.run
    async def run(self, args: BareInput) -> int:
        timeout = timedelta(seconds=30)
        total = 0
        for _ in range(args.steps):
            path = await workflow.execute_local_activity(
                bare_model, args.path, start_to_close_timeout=timeout
            )
            if args.tool_queue is None:
                text = await workflow.execute_local_activity(
                    bare_read, path, start_to_close_timeout=timeout
                )
            else:
                text = await workflow.execute_activity(
                    bare_read, path, task_queue=args.tool_queue, start_to_close_timeout=timeout
                )
            total += len(text)
        return total
