"""The MCP surface of one Filegate session: tools listed from it, calls sent through its gate.

``filegate mcp`` serves one :class:`~filegate.workflows.session.SessionWorkflow`
to MCP clients. Every ``tools/call`` becomes the session's ``call`` update, so
the call passes the same gate as an agent's (rules, read-before-edit, grants,
the tools worker's policies and journal). When a rule interrupts it, the
client is asked, and its answer becomes the session's ``decide`` update, with
the reviewer's name and ``via="mcp"`` in the audit log:

- **Form elicitation.** The question shows the change preview and has one
  field, ``decision`` (``approve`` or ``reject``). On a 2026-07-28 connection
  the question rides an ``InputRequiredResult`` and the client retries the
  call with the answer (the stateless flow); on an older one it is an
  ``elicitation/create`` request sent while the call waits.
- **Fail closed.** A client that declines, cancels or cannot elicit gets an
  error result and nothing runs. The approval stays open in the session, so
  ``filegate approve`` or the approval UI can still decide it: a human who
  was not asked keeps the last word, never the client.

Why ``request_state`` is signed: it comes back from the client, which is not
trusted to name another call's approval. It carries the call and approval
ids under an HMAC with a key this process made at start, so a forged or
stale state is refused with one line and decides nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import is_version_at_least
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)

from filegate.cli.approvals import fingerprint_shown
from filegate.cli.mcp_fast import FastReads
from filegate.cli.progress import args_text, rule_text
from filegate.kernel import wire
from filegate.kernel.messages import MediaBlock, ToolCall, ToolSpec
from filegate.kernel.registry import TOOLS
from filegate.workflows.file_tools import ToolResult
from filegate.workflows.session import NotedRead

AskMode = Literal["form", "url"]
"""How a call asks: a form with the preview, or a link to the approval UI."""
STATELESS_VERSION = "2026-07-28"
"""The first protocol revision whose tool calls ask through ``InputRequiredResult``."""
POLL_SECONDS = 0.2
"""How often a waiting call looks for its approval (a query: no history, no Action)."""
HANDOVER_RETRY_SECONDS = 0.2
"""Wait before sending a call again that met the session continuing as new."""
RPC_TIMEOUT = timedelta(seconds=10)
DECISION_FIELD = "decision"
QUESTION_KEY = "filegate_approval"
"""The key of the one input request a call asks (the client echoes it back)."""
PREVIEW_CHARS = 6000
"""Most preview text a question carries (a client shows it in a dialog)."""

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        DECISION_FIELD: {
            "type": "string",
            "title": "Decision",
            "description": "approve runs the call as shown; reject refuses it",
            "enum": ["approve", "reject"],
        }
    },
    "required": [DECISION_FIELD],
}


class BadRequestState(ValueError):
    """A ``request_state`` this process did not issue (forged, altered or from a restart)."""


@dataclass(frozen=True)
class Asked:
    """What a call asked about: signed into ``request_state`` for the client's retry."""

    call_id: str
    approval_id: str
    fingerprint: str | None
    mode: AskMode = "form"


@dataclass
class StateSigner:
    """Signs and checks ``request_state`` with a key that lives in this process only."""

    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def sign(self, asked: Asked) -> str:
        body = json.dumps(
            [asked.call_id, asked.approval_id, asked.fingerprint, asked.mode],
            separators=(",", ":"),
        ).encode()
        mac = hmac.new(self.key, body, hashlib.sha256).hexdigest()
        return base64.urlsafe_b64encode(body).decode() + "." + mac

    def check(self, state: str) -> Asked:
        encoded, _, mac = state.partition(".")
        try:
            body = base64.urlsafe_b64decode(encoded.encode())
        except ValueError:
            raise BadRequestState("request_state is not one this server issued") from None
        expected = hmac.new(self.key, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, expected):
            raise BadRequestState(
                "request_state is not one this server issued (or the server restarted): "
                "call the tool again"
            )
        call_id, approval_id, fingerprint, mode = json.loads(body)
        return Asked(str(call_id), str(approval_id), fingerprint, mode)


def preview_text(approval: dict[str, Any]) -> str:
    """The question a reviewer reads: the call, the rule, and the change it would make."""
    tool = str(approval.get("tool", "?"))
    lines = [
        f"Filegate: {tool} {args_text(approval.get('args') or {})}",
        f"needs your approval ({rule_text(approval.get('rule'))}).",
    ]
    preview = approval.get("preview") or {}
    if preview.get("diff"):
        lines += ["", str(preview["diff"])]
    if preview.get("deleted"):
        lines += ["", "deletes:", *(f"  {p}" for p in preview["deleted"])]
        more = int(preview.get("deleted_more") or 0) + int(preview.get("deleted_hidden") or 0)
        if more:
            lines.append(f"  and {more} more")
    if preview.get("command"):
        where = f" in {preview['cwd']}" if preview.get("cwd") else ""
        lines += ["", f"runs{where}: {preview['command']}"]
    text = "\n".join(lines)
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "\n[preview truncated]"


def _mcp_tool(spec: ToolSpec) -> types.Tool:
    """One Filegate tool as MCP lists it, with the registry's read-only/destructive hints."""
    known = TOOLS.get(spec.name)
    mutates = known is not None and known.mutates
    hints = types.ToolAnnotations(read_only_hint=not mutates, destructive_hint=mutates)
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.parameters,
        annotations=hints,
    )


def _call_result(result: ToolResult) -> types.CallToolResult:
    """A session's answer as an MCP result: text and images, its error flag kept."""
    content: list[types.ContentBlock] = []
    blocks = result.outcome.content
    if isinstance(blocks, str):
        content.append(types.TextContent(type="text", text=blocks))
    else:
        for block in blocks:
            if isinstance(block, MediaBlock) and block.type == "image":
                content.append(
                    types.ImageContent(type="image", data=block.base64, mime_type=block.mime_type)
                )
            elif not isinstance(block, MediaBlock):
                content.append(types.TextContent(type="text", text=block.text))
    return types.CallToolResult(content=content, is_error=result.is_error)


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _client_modes(ctx: ServerRequestContext[Any]) -> set[AskMode]:
    """The elicitation modes the client declared (a bare ``elicitation: {}`` is form)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return set()
    modes: set[AskMode] = {"url"} if elicitation.url is not None else set()
    if elicitation.form is not None or elicitation.url is None:
        modes.add("form")
    return modes


def stateless(ctx: ServerRequestContext[Any]) -> bool:
    return bool(ctx.protocol_version) and is_version_at_least(
        ctx.protocol_version, STATELESS_VERSION
    )


class McpGate:
    """The request handlers of ``filegate mcp`` over one session workflow."""

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        reviewer: str,
        ask: AskMode = "form",
        approval_url: str | None = None,
        decide_hint: str | None = None,
        fast: FastReads | None = None,
    ) -> None:
        """``ask``: the mode tried first; ``approval_url``: the approval UI, where a
        ``url`` question sends the human (without it only forms are asked);
        ``fast``: reads the rules alone allow, answered in this process
        (:mod:`filegate.cli.mcp_fast`; only where it serves the backend itself)."""
        if ask == "url" and approval_url is None:
            raise ValueError("asking by URL needs the approval UI's URL")
        self.client = client
        self.workflow_id = workflow_id
        self.reviewer = reviewer
        self.approval_url = approval_url
        self.decide_hint = decide_hint or (
            f"decide it with `filegate approve --workflow {workflow_id} {{id}}` (or reject) "
            "or in the approval UI"
        )
        """How a person decides an approval the client could not: ``{id}`` is its id."""
        self.preferred: tuple[AskMode, ...] = ("url", "form") if ask == "url" else ("form", "url")
        self.signer = StateSigner()
        self._tools: list[types.Tool] | None = None
        self._undelivered: dict[str, str] = {}
        """Call ids by call content, for calls whose answer never reached the client."""
        self._cancelling: set[asyncio.Future[None]] = set()
        self.fast = fast
        self._first_run_id: str | None = None
        self._notes: set[asyncio.Future[None]] = set()
        """``noted`` signals on their way: every later update waits for them, so the
        session has booked a fast read before it runs a call that may depend on it."""

    @property
    def handle(self) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(self.workflow_id)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        # A session's configuration never changes, so neither does its offer: asked once.
        if self._tools is None:
            specs = await self.handle.query(
                wire.SESSION_SPECS_QUERY, result_type=list[ToolSpec], rpc_timeout=RPC_TIMEOUT
            )
            self._tools = [_mcp_tool(spec) for spec in specs]
        return types.ListToolsResult(tools=self._tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.request_state is not None:
            return await self._resume(ctx, params)
        args = params.arguments or {}
        key = _call_key(params.name, args)
        # A client retrying after an error (its timeout, a dropped connection) sends a
        # new request for the same call: it attaches to the call that may have applied
        # instead of applying it again, and gets that call's answer (also "cancelled":
        # the call may have run in part, and sending it once more runs it anew).
        lost = self._undelivered.pop(key, None)
        call = ToolCall(id=lost or uuid.uuid4().hex, name=params.name, args=args)
        if self.fast is not None and lost is None:
            answered = await self._answer_here(call)
            if answered is not None:
                return answered
        return await self._answer(ctx, call, key)

    async def _answer_here(self, call: ToolCall) -> types.CallToolResult | None:
        """A read the rules alone allow, answered in this process and then noted in the
        session (:mod:`filegate.cli.mcp_fast`); None: it goes the long way."""
        assert self.fast is not None
        checked = self.fast.eligible(call)
        if checked is None:
            return None
        if self._first_run_id is None:
            described = await self.handle.describe(rpc_timeout=RPC_TIMEOUT)
            self._first_run_id = described.raw_description.workflow_execution_info.first_run_id
        try:
            outcome = await asyncio.to_thread(
                self.fast.answer, checked, call, self.workflow_id, self._first_run_id
            )
        except Exception:  # a policy name this worker lacks, a backend fault: the long
            return None  # way answers it, with the error result the session gives
        if outcome is None or outcome.media:
            return None  # an offloaded result, or media frames: the long way keeps them
        noted = NotedRead(call=call, status=outcome.status, fingerprint=outcome.fingerprint)
        note = asyncio.ensure_future(self._note(noted))
        self._notes.add(note)
        note.add_done_callback(self._notes.discard)
        return _call_result(ToolResult(tool_call_id=call.id, name=call.name, outcome=outcome))

    async def _note(self, noted: NotedRead) -> None:
        """Tell the session about a read answered here. Lost (the server unreachable), the
        read is merely not booked: a later edit asks for a read first, a write carries no
        stale-write fingerprint; neither lets anything through that the rules refuse."""
        with contextlib.suppress(Exception):
            await self.handle.signal(wire.SESSION_NOTED_SIGNAL, noted, rpc_timeout=RPC_TIMEOUT)

    async def _answer(
        self, ctx: ServerRequestContext[Any], call: ToolCall, key: str
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Send ``call`` (or attach to it) and answer it. An answer that never reaches
        the client is remembered for its retry; a client that cancels stops the call."""
        try:
            update = await self._send(call)
            return await self._until_answered(ctx, update, call.id)
        except BaseException as exc:
            self._undelivered[key] = call.id
            while len(self._undelivered) > MAX_UNDELIVERED:
                self._undelivered.pop(next(iter(self._undelivered)))
            if isinstance(exc, asyncio.CancelledError):
                stopping = asyncio.ensure_future(self._cancel(call.id))
                self._cancelling.add(stopping)
                stopping.add_done_callback(self._cancelling.discard)
            raise

    async def _cancel(self, call_id: str) -> None:
        """Stop a call its client cancelled (its search or command stops; a call that
        waits for a person keeps its approval open)."""
        with contextlib.suppress(Exception):
            await self.handle.signal(
                wire.SESSION_CANCEL_CALL_SIGNAL, call_id, rpc_timeout=RPC_TIMEOUT
            )

    async def _send(self, call: ToolCall) -> WorkflowUpdateHandle[ToolResult]:
        """Start the call as the session's update (its id is the call's: a retry attaches).

        Waiting for the session to admit it can outlast one RPC: a long call the
        session runs beside it (``--root``) holds the workflow task that admits the
        next. The update is on its way then, so the wait is asked again under the same
        id, which attaches to it: answered once, applied once (issue 54; the old code
        gave the client a protocol error and applied the call anyway).
        """
        if self._notes:  # booked before this call runs (an edit after a fast read)
            await asyncio.gather(*self._notes, return_exceptions=True)
        while True:
            try:
                return await self.handle.start_update(
                    wire.SESSION_CALL_UPDATE,
                    call,
                    id=update_id(call.id),
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    result_type=ToolResult,
                    rpc_timeout=RPC_TIMEOUT,
                )
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                continue
            except WorkflowUpdateFailedError as exc:
                if _failure_type(exc) != wire.SESSION_HANDOVER_ERROR:
                    refused = f"the session refused the call: {exc.cause}"
                    raise MCPError(types.INTERNAL_ERROR, refused) from None
                await asyncio.sleep(HANDOVER_RETRY_SECONDS)

    async def _until_answered(
        self,
        ctx: ServerRequestContext[Any],
        update: WorkflowUpdateHandle[ToolResult],
        call_id: str,
        sent_to_ui: str | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Wait for the result, asking the client each time the call waits for a human.

        ``sent_to_ui``: an approval the human was sent to the UI for; the call
        waits for its decision there instead of asking again.
        """
        while True:
            answer = await self._result_or_approval(update, call_id, sent_to_ui)
            if isinstance(answer, ToolResult):
                return _call_result(answer)
            mode = self._mode(ctx)
            if mode is None:
                return self._unasked(answer, "this MCP client cannot ask you (no elicitation)")
            asked = Asked(call_id, str(answer["id"]), fingerprint_shown(answer), mode)
            params = self._question(asked, answer)
            if stateless(ctx):
                request = types.ElicitRequest(params=params)
                return types.InputRequiredResult(
                    input_requests={QUESTION_KEY: request}, request_state=self.signer.sign(asked)
                )
            if isinstance(params, types.ElicitRequestURLParams):
                reply = await ctx.session.elicit_url(
                    params.message, params.url, asked.approval_id, ctx.request_id
                )
            else:
                reply = await ctx.session.elicit_form(
                    params.message, APPROVAL_SCHEMA, related_request_id=ctx.request_id
                )
            refused = await self._apply(reply, asked, answer)
            if refused is not None:
                return refused
            sent_to_ui = asked.approval_id if mode == "url" else None

    def _mode(self, ctx: ServerRequestContext[Any]) -> AskMode | None:
        """How to ask this client: the preferred mode it supports (URL only with a UI)."""
        offered = _client_modes(ctx)
        if self.approval_url is None:
            offered.discard("url")
        return next((mode for mode in self.preferred if mode in offered), None)

    def _question(
        self, asked: Asked, approval: dict[str, Any]
    ) -> types.ElicitRequestFormParams | types.ElicitRequestURLParams:
        question = preview_text(approval)
        if asked.mode == "url" and self.approval_url is not None:
            # The approval's id rides the fragment too: the 2026-07-28 flow carries
            # no elicitation id in an embedded question.
            return types.ElicitRequestURLParams(
                message=f"{question}\n\nDecide approval {asked.approval_id} on the approval page.",
                url=f"{self.approval_url}#{asked.approval_id}",
                elicitation_id=asked.approval_id,
            )
        return types.ElicitRequestFormParams(message=question, requested_schema=APPROVAL_SCHEMA)

    async def _resume(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """A client's retry with the answer to the question a call asked (stateless flow)."""
        try:
            asked = self.signer.check(params.request_state or "")
        except BadRequestState as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        reply = (params.input_responses or {}).get(QUESTION_KEY)
        approval = await self._pending(asked.approval_id) or {"id": asked.approval_id}
        if not isinstance(reply, types.ElicitResult):
            reply = types.ElicitResult(action="cancel")
        refused = await self._apply(reply, asked, approval)
        if refused is not None:
            return refused
        update = self.handle.get_update_handle(update_id(asked.call_id), result_type=ToolResult)
        sent = asked.approval_id if asked.mode == "url" else None
        return await self._until_answered(ctx, update, asked.call_id, sent)

    async def _apply(
        self, reply: types.ElicitResult, asked: Asked, approval: dict[str, Any]
    ) -> types.CallToolResult | None:
        """Send the client's decision; an error result when it gave none (nothing runs).

        A URL question accepted is no decision: the human decides on the page.
        """
        if asked.mode == "url" and reply.action == "accept":
            return None
        choice = (reply.content or {}).get(DECISION_FIELD) if reply.action == "accept" else None
        if choice not in ("approve", "reject"):
            what = "declined" if reply.action == "decline" else "gave no decision"
            return self._unasked(approval, f"the MCP client {what}")
        payload: dict[str, Any] = {
            "id": asked.approval_id,
            "decision": choice,
            "reviewer": self.reviewer,
            "via": "mcp",
        }
        if asked.fingerprint is not None:
            payload["preview_fingerprint"] = asked.fingerprint
        try:
            await self.handle.execute_update(
                wire.DECIDE_UPDATE, payload, result_type=dict[str, Any], rpc_timeout=RPC_TIMEOUT
            )
        except WorkflowUpdateFailedError as exc:
            # Decided elsewhere first (the CLI, the UI): the call follows that decision.
            # A preview that changed meanwhile: the call is asked about again.
            still = await self._pending(asked.approval_id)
            if still is not None and fingerprint_shown(still) == asked.fingerprint:
                refused = f"the decision was refused: {exc.cause}"
                raise MCPError(types.INTERNAL_ERROR, refused) from None
        return None

    def _unasked(self, approval: dict[str, Any], why: str) -> types.CallToolResult:
        tool = approval.get("tool", "the call")
        return _error_result(
            f"Error: {tool} was not run: it needs a human's approval and {why}. "
            f"Approval {approval['id']} of session {self.workflow_id} stays open: "
            f"{self.decide_hint.replace('{id}', str(approval['id']))}."
        )

    async def _result_or_approval(
        self, update: WorkflowUpdateHandle[ToolResult], call_id: str, skip: str | None
    ) -> ToolResult | dict[str, Any]:
        """The call's result, or its pending approval (not ``skip``) once its preview is ready."""
        result = asyncio.ensure_future(update.result())
        # A cancelled wait ends in the SDK's own error: retrieve it, it is not news.
        result.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            while True:
                done, _ = await asyncio.wait({result}, timeout=POLL_SECONDS)
                if done:
                    return result.result()
                for approval in await self._listed():
                    mine = approval.get("tool_call_id") == call_id and approval.get("id") != skip
                    if mine and not approval.get("preview_pending"):
                        return approval
        finally:
            result.cancel()

    async def _listed(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = await self.handle.query(
            wire.PENDING_QUERY, result_type=list[dict[str, Any]], rpc_timeout=RPC_TIMEOUT
        )
        return listed

    async def _pending(self, approval_id: str) -> dict[str, Any] | None:
        return next((a for a in await self._listed() if a.get("id") == approval_id), None)


MAX_UNDELIVERED = 256
"""Calls whose answer was lost, remembered for a client's retry (oldest dropped first)."""


def _call_key(name: str, args: dict[str, Any]) -> str:
    text = json.dumps([name, args], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def update_id(call_id: str) -> str:
    return f"mcp-{call_id}"


def _failure_type(exc: WorkflowUpdateFailedError) -> str | None:
    """The ``ApplicationError`` type an update failed with (the innermost that has one)."""
    cause: BaseException | None = exc.cause
    while cause is not None:
        kind = getattr(cause, "type", None)
        if kind:
            return str(kind)
        cause = cause.__cause__
    return None


__all__ = ["McpGate", "StateSigner", "preview_text"]
