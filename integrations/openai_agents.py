"""Filegate's file tools as OpenAI Agents SDK function tools, for agents run under Temporal.

An OpenAI Agents SDK ``Agent`` runs inside a Temporal workflow through
``temporalio.openai_agents.OpenAIAgentsPlugin``: the plugin turns every model
call into an activity, while the agent loop and its function tools run in the
workflow. :func:`filegate_tools` builds one SDK ``FunctionTool`` per Filegate
tool the workflow may offer, and each tool's ``on_invoke_tool`` hands the
call to a :class:`ToolRunner`. The runner this module ships,
:class:`FileToolsRunner`, is a thin shell over
:class:`filegate.workflows.FileTools`, the tool side ``AgentWorkflow`` itself
runs on: validate, route, gate, wait for a human where a rule says so, then
run the ``filegate.<tool>`` activity on the route's task queue.

Why the SDK's own tool approvals (``needs_approval``) are not used: they stop
the run and hand a ``RunState`` back to the caller to resume later. Inside a
workflow there is nothing to hand back to; a call that needs a human simply
waits, durably, inside ``on_invoke_tool`` (in ``FileTools``) for a decision
made through Filegate's approval handlers, which ``FileTools`` registers on
the workflow, so ``filegate approvals``/``approve``, the approval UI and every
other Filegate client find and decide it like an ``AgentWorkflow``.

Why a configuration the rules cannot hold on fails the host workflow before
the model is asked: a permission rule that ``execute`` could bypass (a host
shell next to ``deny read /secrets/**``; :mod:`filegate.kernel.execute_gate`)
is refused before any tool runs, with the non-retryable
``InvalidConfiguration`` ``ApplicationError`` of ``FileTools.check_config``.
Where it is raised decides what the host sees:

- in ``on_invoke_tool`` the SDK wraps any exception in a ``UserError``
  ("Error running tool ..."), which ``OpenAIAgentsPlugin`` re-raises as an
  ``AgentsWorkflowError`` caused by ours: the workflow fails, but only after
  a model call offered the tools, and the failure's own type is
  ``AgentsWorkflowError`` (not marked non-retryable), ours only its cause;
- in a tool's ``is_enabled``, which the SDK evaluates as it lists the agent's
  tools at the start of every turn (before the model call, outside its
  tool-error wrapping), the ``ApplicationError`` leaves ``Runner.run`` as it
  is and the workflow fails with it;
- in ``@workflow.init`` nothing raises: ``FileTools`` keeps its error for the
  run (any other exception there fails the workflow *task*, retried forever;
  temporalio 1.35 happens to fail the workflow for an ``ApplicationError``,
  which neither relies on).

So :func:`filegate_tools` checks at once when called from the workflow's run
(or a handler), each tool's ``is_enabled`` checks when the SDK lists them
(which also covers tools built in ``@workflow.init``), and ``on_invoke_tool``
checks once more, so no call reaches a runner whose configuration is refused.

This module runs in workflow code: it imports only the SDK's tool types and
Filegate's workflow-side modules, and performs no I/O. Import it in a
workflow file under ``workflow.unsafe.imports_passed_through()`` (the plugin
already passes the ``agents`` and ``openai`` packages through the sandbox).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from agents import (
    AgentBase,
    FunctionTool,
    RunContextWrapper,
    Tool,
    ToolOutputFileContent,
    ToolOutputImage,
    ToolOutputText,
)
from agents.tool_context import ToolContext
from temporalio import workflow
from temporalio.converter import DataConverter, DefaultPayloadConverter

from filegate.kernel.messages import (
    RAW_ARGS_KEY,
    ContentBlock,
    MediaBlock,
    TextBlock,
    ToolCall,
    ToolSpec,
)
from filegate.kernel.tool_types import TOOL_ORDER, ToolOutcome
from filegate.workflows import tool_descriptions as descriptions
from filegate.workflows.file_tools import FileTools

__all__ = [
    "FileToolsRunner",
    "ToolOutput",
    "ToolRunner",
    "agents_data_converter",
    "filegate_instructions",
    "filegate_tools",
    "strict_parameters",
    "to_sdk_output",
]

ToolOutput = str | ToolOutcome
"""What a :class:`ToolRunner` answers: final text, or an outcome with content blocks."""

SdkToolOutput = str | list[ToolOutputText | ToolOutputImage | ToolOutputFileContent]
"""What an SDK ``on_invoke_tool`` returns to the model."""


@runtime_checkable
class ToolRunner(Protocol):
    """What the adapter needs from the workflow side: the offer and one call at a time.

    ``specs`` are the tools the model may see, already filtered by visibility
    (whitelist, backend capabilities) and described consistently with each
    other (:mod:`filegate.workflows.tool_descriptions`). ``run`` does the whole
    Filegate call path for one model call and never raises for anything the
    model did wrong: bad arguments, a denied path, a rejected approval and a
    failed activity all come back as error text for the model. ``call_id`` is
    the model's own tool-call id; the runner makes it unique per workflow
    (:func:`~filegate.kernel.tool_types.activity_call_id`) before it keys the
    idempotency journal.

    A runner may also define ``check_config()``, raising when its
    configuration must not run at all (:meth:`FileToolsRunner.check_config`);
    :func:`filegate_tools` calls it before any call reaches ``run`` (module
    docstring). It is optional, so runners written before it stay runners.
    """

    def specs(self) -> Sequence[ToolSpec]: ...

    async def run(self, name: str, args: dict[str, Any], call_id: str) -> ToolOutput: ...


def filegate_tools(runner: ToolRunner, *, strict: bool = True) -> list[Tool]:
    """One SDK ``FunctionTool`` per tool in ``runner.specs()``, in Filegate's order.

    Build them inside the workflow, once per agent
    (``Agent(tools=filegate_tools(FileToolsRunner(files)))``): ``on_invoke_tool``
    runs in workflow code, so it may schedule activities and wait for
    approvals. ``strict`` sends OpenAI strict-mode schemas
    (:func:`strict_parameters`), which the SDK recommends and OpenAI models
    follow exactly; pass False for a provider that rejects them.

    A configuration the permission rules cannot hold on (``check_config``)
    fails the host workflow before the model is asked: at once when this is
    called from the workflow's run, else (built in ``@workflow.init``, where
    the error is left for the run, as ``FileTools`` does) when the SDK first
    lists the tools; see the module docstring.
    """
    check = _config_check(runner)
    if check is not None and _in_workflow_run():
        check()
    return [_function_tool(runner, spec, strict=strict, check=check) for spec in runner.specs()]


ConfigCheck = Callable[[], None]
"""A runner's ``check_config``: returns, or raises the error that fails the run."""


def _config_check(runner: ToolRunner) -> ConfigCheck | None:
    check = getattr(runner, "check_config", None)
    return check if callable(check) else None


def _in_workflow_run() -> bool:
    """Whether this runs in a workflow coroutine (its run or a handler), not ``__init__``.

    Temporal calls a workflow's ``__init__`` synchronously on the workflow's
    event loop before it starts the run as a task, so there (and outside any
    workflow) no task is current.
    """
    if not workflow.in_workflow():
        return False
    try:
        return asyncio.current_task() is not None
    except RuntimeError:  # no running loop
        return False


def _enabled_when_allowed(
    check: ConfigCheck,
) -> Callable[[RunContextWrapper[Any], AgentBase], bool]:
    """An SDK ``is_enabled`` that raises the runner's configuration error, else True.

    The SDK evaluates it as it lists an agent's tools, at the start of every
    turn and before the model call, and lets what it raises leave
    ``Runner.run`` unwrapped (module docstring).
    """

    def is_enabled(context: RunContextWrapper[Any], agent: AgentBase) -> bool:
        check()
        return True

    return is_enabled


def filegate_instructions(runner: ToolRunner, extra: str | None = None) -> str:
    """Filegate's default system prompt for the tools ``runner`` offers, then ``extra``.

    The prompt tells the model about virtual paths, read-before-edit, large
    results and approvals, naming only tools it can see (contract §3); use it
    as (the start of) the agent's ``instructions``. Over a
    :class:`FileToolsRunner` it is ``FileTools.system_prompt``, which also maps
    the routes' paths for the shell when a composite backend offers
    ``execute``: the prompt ``AgentWorkflow`` would send.
    """
    extra = extra.strip() if extra and extra.strip() else None
    if isinstance(runner, FileToolsRunner):
        return runner.tools.system_prompt(extra, extend=True)
    offered = {spec.name for spec in runner.specs()}
    prompt = descriptions.default_system_prompt([n for n in TOOL_ORDER if n in offered])
    return f"{prompt}\n\n{extra}" if extra else prompt


def _function_tool(
    runner: ToolRunner, spec: ToolSpec, *, strict: bool, check: ConfigCheck | None
) -> FunctionTool:
    optional = _optional_fields(spec.parameters)

    async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> SdkToolOutput:
        if check is not None:
            # Passes wherever is_enabled did (FileTools fixes the error when built);
            # for a tool whose is_enabled was replaced: still no call runs, and the
            # plugin fails the workflow with this error as the cause.
            check()
        args = _parse_arguments(arguments, optional)
        return to_sdk_output(await runner.run(spec.name, args, context.tool_call_id))

    return FunctionTool(
        name=spec.name,
        description=spec.description,
        # Copies either way: the specs are shared across workflows (read-only).
        params_json_schema=(
            strict_parameters(spec.parameters) if strict else copy.deepcopy(spec.parameters)
        ),
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=strict,
        is_enabled=_enabled_when_allowed(check) if check is not None else True,
    )


def _optional_fields(schema: Mapping[str, Any]) -> frozenset[str]:
    properties = schema.get("properties") or {}
    return frozenset(properties) - frozenset(schema.get("required") or ())


def strict_parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's argument schema in OpenAI strict form, meaning kept.

    Strict mode makes every property required and allows no ``default``
    (some deployments refuse the keyword). An optional Filegate argument
    therefore becomes *nullable*: null means "use the default", the default
    is named in the description, and :func:`filegate_tools` drops the nulls
    again before Filegate validates the call, so the pydantic defaults of
    :data:`~filegate.kernel.tool_types.TOOL_ARGS` still decide.
    """
    strict = copy.deepcopy(dict(schema))  # the caller's (shared) spec stays as it was
    properties: dict[str, dict[str, Any]] = strict.get("properties") or {}
    for name in _optional_fields(schema):
        properties[name] = _nullable(properties[name])
    strict["required"] = list(properties)
    strict["additionalProperties"] = False
    return strict


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    prop = dict(prop)
    default = prop.pop("default", None)
    prop.pop("title", None)
    outer = {k: prop.pop(k) for k in ("description",) if k in prop}
    variants = prop.get("anyOf")
    if isinstance(variants, list):
        if not any(v.get("type") == "null" for v in variants if isinstance(v, dict)):
            variants.append({"type": "null"})
        nullable = {**prop}
    else:
        nullable = {"anyOf": [prop, {"type": "null"}]}
    if default is not None:
        note = f"null = the default ({json.dumps(default)})."
        outer["description"] = f"{outer['description']} {note}" if outer else note
    return {**nullable, **outer}


def _parse_arguments(arguments: str, optional: frozenset[str]) -> dict[str, Any]:
    """The model's argument text as Filegate expects it: nulls of optional fields dropped.

    Text that is not a JSON object is passed on under ``RAW_ARGS_KEY``, so the
    runner answers with Filegate's "not valid JSON" error rather than the
    run failing.
    """
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {RAW_ARGS_KEY: arguments}
    if not isinstance(parsed, dict):
        return {RAW_ARGS_KEY: arguments}
    return {k: v for k, v in parsed.items() if not (v is None and k in optional)}


def to_sdk_output(output: ToolOutput) -> SdkToolOutput:
    """A Filegate tool result as the SDK sends it to the model.

    Text stays text. Content blocks (an image or PDF read) become the SDK's
    structured outputs, and video frames follow as images: the SDK sends
    function outputs as they are, so there is no separate user message for
    them as in ``AgentWorkflow`` (contract §6).
    """
    if isinstance(output, str):
        return output
    content = output.content
    blocks = [TextBlock(text=content)] if isinstance(content, str) else list(content)
    blocks += output.media
    if all(isinstance(b, TextBlock) for b in blocks):
        return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
    return [_sdk_block(b) for b in blocks]


def _sdk_block(block: ContentBlock) -> ToolOutputText | ToolOutputImage | ToolOutputFileContent:
    if isinstance(block, TextBlock):
        return ToolOutputText(text=block.text)
    url = f"data:{block.mime_type};base64,{block.base64}"
    if block.type in ("image", "video"):
        return ToolOutputImage(image_url=url)
    return ToolOutputFileContent(file_data=url, filename=_file_name(block))


def _file_name(block: MediaBlock) -> str | None:
    return block.path.rsplit("/", 1)[-1] if block.path else None


def agents_data_converter(converter: DataConverter) -> DataConverter:
    """``converter`` made acceptable to ``OpenAIAgentsPlugin``, its payload codec kept.

    The plugin installs its own payload converter: it swaps it in for the
    default one and refuses any other class, including (under temporalio 1.35,
    which wraps every configured payload converter; sdk-python#1875) its own.
    Filegate's clients use the pydantic converter, so hand the plugin the
    default class and let it swap. Both write the same ``json/plain``
    payloads, so Filegate's tools workers read what the agent workflow
    schedules; keeping the codec keeps the S3 references of large results
    readable (:func:`filegate.plugin.connect`).
    """
    return dataclasses.replace(converter, payload_converter_class=DefaultPayloadConverter)


class FileToolsRunner:
    """The :class:`ToolRunner` over :class:`~filegate.workflows.FileTools`: its whole call path.

    ``FileTools`` does the work (validation, routes and fan-out, the State
    backend, the permission rules, the approval wait with its change preview,
    read-before-edit, the activity, rendering); this class only adapts the
    call and keeps one rule of its own. The SDK starts a turn's calls
    concurrently, each in its own ``on_invoke_tool``, so ``FileTools`` sees
    them as separate one-call turns and cannot order them by path as it does
    a whole turn. The runner therefore runs them one at a time, in the order
    the SDK started them (an ``asyncio.Lock``: FIFO, and deterministic in a
    workflow), so a read after a write of the same file sees the write. A call
    waiting for a human holds the later calls of its turn back, which is what
    the model asked for: they may depend on it.

    Build ``FileTools`` in the workflow's ``@workflow.init``, so the approval
    handlers exist before the first query or update arrives; the runner may
    be built there or in ``run``, and so may its tools (:func:`filegate_tools`
    refuses a bad configuration in the run either way). The runner only calls
    ``tools``' methods, so it also works on a ``FileTools`` the sandbox
    re-imported (a lazy ``filegate.workflows`` export imported in a workflow
    file is loaded again inside the sandbox, as a class of its own; import it
    from ``filegate.workflows.file_tools`` to share the host's).
    """

    def __init__(self, tools: FileTools) -> None:
        self.tools = tools
        self._one_at_a_time = asyncio.Lock()

    def specs(self) -> list[ToolSpec]:
        return self.tools.specs()

    def check_config(self) -> None:
        """Raise ``FileTools``' configuration error, if any (the run must not go on).

        A rule ``execute`` could bypass: a non-retryable ``ApplicationError``
        of type ``InvalidConfiguration`` naming the rule and the backend.
        :func:`filegate_tools` calls this where raising fails the workflow,
        never in ``@workflow.init`` (module docstring).
        """
        self.tools.check_config()

    async def run(self, name: str, args: dict[str, Any], call_id: str) -> ToolOutcome:
        # FileTools numbers each call as a turn when it starts it (inside the lock,
        # so in the SDK's start order, which replay repeats) and makes the model's
        # call id unique per workflow with that number.
        async with self._one_at_a_time:
            result = await self.tools.run(ToolCall(id=call_id, name=name, args=args))
        return result.outcome
