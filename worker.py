"""Filegate command line: workers, scripted runs, the demo, and human approvals.

``filegate worker --role agent`` serves the AgentWorkflow and the model
activity; ``filegate worker --role tools --backend filesystem --root DIR
--task-queue Q`` serves the file-tool activities of one backend on its own
task queue (its configuration and credentials never leave this process).
``filegate worker --role agent --local-backend --backend filesystem --root DIR``
also hosts that backend in the agent worker, for ``kind="local"`` refs: its
tools run as local activities there, with no task-queue round trips.
``python worker.py --role ...`` is the same as ``filegate worker --role ...``.

``filegate run`` and ``filegate demo`` start for their own duration whatever is
missing (embedded Temporal and S3 servers, an agent worker and a tools worker)
and stop what they started. ``filegate approvals / approve / reject / respond /
edit / status`` are plain clients of any Temporal address: they find pending
approvals with a visibility query and send decisions as the workflow's
``decide`` update, so a bad id is refused immediately (contract §5, §10).

Client commands address the workflow's handlers by name (contract §9) and import
neither the workflow nor the worker code: they start in about half the time.
Commands that run workers import that code where they build them. Every
process shares one data converter: pydantic plus, when S3 is configured, the
S3 payload codec (see :func:`connect`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from filegate.backends.embedded import (
    LOOPBACK,
    ManagedServer,
    S3DevServer,
    TemporalDevServer,
    is_listening,
)
from filegate.backends.settings import ENV_PREFIX, Settings
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, TLSConfig

if TYPE_CHECKING:
    from filegate.activities.tools import FileToolActivities
    from filegate.backends.artifacts import ArtifactStore
    from filegate.backends.policy import PolicyConfig
    from filegate.kernel.messages import ModelSpec
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.kernel.protocol import BackendProtocol
    from filegate.workflows import AgentResult
    from temporalio.worker import Worker

log = logging.getLogger("filegate.worker")

BACKEND_KINDS = ("filesystem", "local-shell", "sandbox", "state", "store")

DEFAULT_TEMPORAL_ADDRESS: str = Settings.model_fields["temporal_address"].default
"""Temporal's usual local address; ``run`` starts or reuses a server there."""

# AgentWorkflow handler names (contract §9), used by every client-side call.
WORKFLOW_TYPE = "AgentWorkflow"
PENDING_QUERY = "pending_approvals"
STATUS_QUERY = "status"
TRANSCRIPT_QUERY = "transcript"
DECIDE_UPDATE = "decide"  # also the signal's name

QUERY_TIMEOUT = timedelta(seconds=5)
"""RPC budget of one query: a workflow whose worker is gone must not hang a CLI."""

DECIDE_TIMEOUT = 20.0
"""Seconds a decision waits for a worker to validate it (the update needs a live worker)."""


class CliError(Exception):
    """A failure the CLI reports as one clear line and a non-zero exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# =========================================================================== connection


@dataclass(frozen=True)
class Target:
    """Which Temporal frontend a command talks to, and whether the user chose it."""

    settings: Settings
    tls: TLSConfig | None = None
    configured: bool = False
    """True when the address came from a flag or the environment: never auto-start."""


_TLS_ENV = {
    "tls_cert": ("FILEGATE_TLS_CERT", "TEMPORAL_TLS_CLIENT_CERT_PATH"),
    "tls_key": ("FILEGATE_TLS_KEY", "TEMPORAL_TLS_CLIENT_KEY_PATH"),
    "tls_ca": ("FILEGATE_TLS_CA", "TEMPORAL_TLS_SERVER_CA_CERT_PATH"),
}
"""TLS file paths: flag, else ``FILEGATE_*``, else the ``temporal`` CLI's variable."""


def _env_first(names: Sequence[str]) -> str | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def _read_file(path: str, what: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror or exc}", 2) from None


def tls_config(args: argparse.Namespace) -> TLSConfig | None:
    """A TLS config when any certificate option is set (mTLS when cert and key are)."""
    paths = {key: getattr(args, key, None) or _env_first(names) for key, names in _TLS_ENV.items()}
    if not any(paths.values()):
        return None
    if bool(paths["tls_cert"]) != bool(paths["tls_key"]):
        raise CliError("--tls-cert and --tls-key go together", 2)

    def load(key: str, what: str) -> bytes | None:
        path = paths[key]
        return _read_file(path, what) if path else None

    return TLSConfig(
        server_root_ca_cert=load("tls_ca", "CA certificate"),
        client_cert=load("tls_cert", "client certificate"),
        client_private_key=load("tls_key", "client key"),
    )


def target_from(args: argparse.Namespace) -> Target:
    """Settings from the environment, overridden by ``--address`` / ``--namespace``."""
    settings = Settings.from_env()
    updates: dict[str, Any] = {}
    if getattr(args, "address", None):
        updates["temporal_address"] = args.address
    if getattr(args, "namespace", None):
        updates["temporal_namespace"] = args.namespace
    configured = bool(updates.get("temporal_address")) or any(
        os.environ.get(name, "").strip()
        for name in (ENV_PREFIX + "TEMPORAL_ADDRESS", Settings.FALLBACK_ENV["temporal_address"])
    )
    return Target(settings.model_copy(update=updates), tls_config(args), configured)


FROM_SETTINGS: Literal["settings"] = "settings"
"""``connect(artifacts=FROM_SETTINGS)``: the artifact store of the configured S3, if any."""


async def connect(
    settings: Settings | None = None,
    tls: TLSConfig | None = None,
    *,
    artifacts: ArtifactStore | Literal["settings"] | None = FROM_SETTINGS,
) -> Client:
    """A client with the data converter every Filegate process must share.

    That is the pydantic converter plus, when there is an artifact store, the
    S3 payload codec (:func:`~activities.history.filegate_data_converter`):
    payloads over its threshold travel as references, so every process that
    encodes or decodes them -- workers, ``run``, ``approvals``, ``status``, the
    UI -- needs the same store. By default it is built from the settings' S3
    (none when ``FILEGATE_S3_ENDPOINT`` is unset); pass a store or None to
    choose. Temporal is reached first, so its failure is the one reported.
    """
    settings = settings or Settings.from_env()
    try:
        client = await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter,
            tls=tls or False,
        )
    except RuntimeError as exc:  # the core SDK reports connection failures this way
        raise CliError(
            f"cannot connect to Temporal at {settings.temporal_address}: {exc}. Start one "
            "(`filegate run` does it for you) or set TEMPORAL_ADDRESS."
        ) from None
    store = await configured_store(settings) if isinstance(artifacts, str) else artifacts
    return with_payload_codec(client, store)


def with_payload_codec(client: Client, store: ArtifactStore | None) -> Client:
    """``client`` (same connection) with the converter for ``store``; as is without one."""
    if store is None:
        return client
    from filegate.activities.history import filegate_data_converter

    config = client.config()
    config["data_converter"] = filegate_data_converter(store)
    return Client(**config)


async def configured_store(settings: Settings) -> ArtifactStore | None:
    """The artifact store on the configured S3, or None when no endpoint is set.

    A half configuration (endpoint without credentials) or an unreachable S3
    is a clear error: processes disagreeing about the codec cannot read each
    other's large payloads.
    """
    if not settings.s3_endpoint:
        return None
    access = S3Access.from_settings(settings)
    if not access.access_key or access.secret_key is None:
        raise CliError(
            f"{ENV_PREFIX}S3_ENDPOINT is set but {ENV_PREFIX}S3_ACCESS_KEY / "
            f"{ENV_PREFIX}S3_SECRET_KEY are not", 2,
        )  # fmt: skip
    return await open_store(access)


async def open_store(access: S3Access) -> ArtifactStore | None:
    """``access.artifact_store()`` off the event loop; S3 failures become a CliError."""
    from filegate.backends.artifacts import ArtifactError

    try:
        return await asyncio.to_thread(access.artifact_store)
    except (ArtifactError, ValueError) as exc:
        raise CliError(f"S3 at {access.endpoint}: {exc}") from None


# =========================================================================== workers


WORKFLOW_TASK_POLLERS = 20
ACTIVITY_TASK_POLLERS = 50
"""Long polls each worker keeps open (the SDK default is 5). With many agents
in flight, tasks that find no waiting poll are written to the server's backlog
and read back; enough polls keep them matched in memory, which raised
``bench/throughput.py`` by a fifth. Override with ``max_concurrent_*_polls``."""


def agent_worker(
    client: Client,
    task_queue: str,
    *,
    artifacts: ArtifactStore | None = None,
    backends: dict[str, BackendProtocol] | None = None,
    journal_dir: str | Path | None = None,
    policies: PolicyConfig | None = None,
    **options: Any,
) -> Worker:
    """The worker that runs AgentWorkflow, the model activity and local backends.

    With ``artifacts`` the model activity keeps the transcript in S3 and the
    workflow sends it by reference plus the new messages (contract §8); it also
    archives evicted messages under ``/conversation_history/``. Without one,
    conversations travel by value. ``client`` should carry the same store's
    payload codec (:func:`connect` / :func:`with_payload_codec`).

    ``backends`` (with ``journal_dir``) are served to ``kind="local"`` backend
    refs: their file tools run as local activities in this worker.
    """
    from filegate.activities.model import ModelActivities
    from filegate.workflows import AgentWorkflow
    from filegate.workflows.runner import agent_runner
    from temporalio.worker import Worker

    options.setdefault("workflow_runner", agent_runner())
    options.setdefault("max_concurrent_workflow_task_polls", WORKFLOW_TASK_POLLERS)
    activities: list[Callable[..., Any]] = [ModelActivities(artifacts).call_model]
    if backends:
        if journal_dir is None:
            raise ValueError("local backends need a journal_dir for their idempotency journal")
        activities += file_tools(backends, journal_dir, artifacts, policies).activities()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=activities,
        **options,
    )


def file_tools(
    backends: dict[str, BackendProtocol],
    journal_dir: str | Path,
    artifacts: ArtifactStore | None,
    policies: PolicyConfig | None,
) -> FileToolActivities:
    """The file tool activities over ``backends``; policies default to the environment's."""
    from filegate.activities.tools import FileToolActivities
    from filegate.backends.policy import PolicyConfig

    config = policies if policies is not None else PolicyConfig.from_env()
    return FileToolActivities(backends, Path(journal_dir), artifacts=artifacts, policies=config)


def make_backend(
    kind: str,
    root: str | Path | None,
    *,
    namespace: str | None = None,
    settings: Settings | None = None,
) -> BackendProtocol:
    """Build one backend from CLI-level settings (credentials stay in this process).

    ``store`` keeps files in the configured S3 bucket under ``namespace``
    (``users/alice`` -> components ``("users", "alice")``), so they outlive a
    thread and are shared by every worker on the same bucket.
    """
    if kind == "state":
        from filegate.kernel.state import StateBackend

        return StateBackend()
    if kind == "store":
        from filegate.backends.store import StoreBackend

        if not namespace:
            raise ValueError(
                "--store-namespace is required for the store backend, e.g. users/alice"
            )
        parts = tuple(part for part in namespace.split("/") if part)
        return StoreBackend.from_settings(settings or Settings.from_env(), parts)
    if root is None:
        raise ValueError(f"--root is required for the {kind} backend")
    Path(root).mkdir(parents=True, exist_ok=True)
    if kind == "filesystem":
        from filegate.backends.filesystem import FilesystemBackend

        return FilesystemBackend(str(root), virtual_mode=True)
    if kind == "local-shell":
        from filegate.backends.local_shell import LocalShellBackend

        return LocalShellBackend(str(root))
    if kind == "sandbox":
        from filegate.backends.bwrap import BwrapSandboxBackend

        return BwrapSandboxBackend(str(root))
    raise ValueError(f"unknown backend kind {kind!r}; choose one of {', '.join(BACKEND_KINDS)}")


def tools_worker(
    client: Client,
    task_queue: str,
    backends: dict[str, BackendProtocol],
    journal_dir: str | Path,
    *,
    artifacts: ArtifactStore | None = None,
    policies: PolicyConfig | None = None,
    **options: Any,
) -> Worker:
    """A worker serving the ``filegate.<tool>`` activities for ``backends``.

    ``artifacts`` turns on large-result offload (contract §7). ``policies`` defaults
    to :meth:`PolicyConfig.from_env` (``FILEGATE_POLICY_FILE`` /
    ``FILEGATE_POLICY_JSON``), read once here; workflows only name policies.
    A per-queue rate limit is ``max_task_queue_activities_per_second=...`` in
    ``options`` (enforced by the server across all workers of the queue).
    """
    from temporalio.worker import Worker

    options.setdefault("max_concurrent_activity_task_polls", ACTIVITY_TASK_POLLERS)
    return Worker(
        client,
        task_queue=task_queue,
        activities=file_tools(backends, journal_dir, artifacts, policies).activities(),
        **options,
    )


async def run_until_stopped(worker: Worker, stop: asyncio.Event | None = None) -> None:
    """Run ``worker`` until SIGTERM/SIGINT (or ``stop``), then shut down gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
    try:
        async with worker:
            log.info("worker polling task queue %s", worker.task_queue)
            await stop.wait()
            log.info("stopping worker on %s", worker.task_queue)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


@asynccontextmanager
async def in_process_workers(
    client: Client,
    agent_queue: str,
    tools_queue: str,
    backends: dict[str, BackendProtocol],
    journal_dir: Path,
    artifacts: ArtifactStore | None = None,
) -> AsyncIterator[None]:
    """An agent worker and one tools worker, polling for the duration of the block.

    ``artifacts`` goes to both: transcripts by reference on the agent side,
    large-result offload and ``/large_tool_results/`` / ``/conversation_history/``
    reads on the tools side.
    """
    async with (
        agent_worker(client, agent_queue, artifacts=artifacts),
        tools_worker(client, tools_queue, backends, journal_dir, artifacts=artifacts),
    ):
        yield


# =========================================================================== local services


@dataclass(frozen=True)
class S3Access:
    """Where the S3 server is; tools workers keep large results there (contract §7)."""

    endpoint: str
    access_key: str | None
    secret_key: str | None
    bucket: str
    secure: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Access:
        """The configured S3 (``FILEGATE_S3_*``); the endpoint must be set."""
        if not settings.s3_endpoint:
            raise ValueError("no S3 endpoint configured")
        secret = settings.s3_secret_key.get_secret_value() if settings.s3_secret_key else None
        return cls(
            settings.s3_endpoint, settings.s3_access_key, secret, settings.s3_bucket,
            settings.s3_secure,
        )  # fmt: skip

    def artifact_store(self) -> ArtifactStore | None:
        """The large-result store on this S3 (bucket ``<bucket>-artifacts``, created if
        missing); None without credentials (large results then stay inline)."""
        from filegate.backends.artifacts import ArtifactStore

        if not self.access_key or self.secret_key is None:
            return None
        settings = Settings.model_validate(
            {
                "s3_endpoint": self.endpoint,
                "s3_access_key": self.access_key,
                "s3_secret_key": self.secret_key,
                "s3_bucket": self.bucket,
                "s3_secure": self.secure,
            }
        )
        return ArtifactStore.from_settings(settings)


@dataclass
class LocalServices:
    """The servers a command uses: configured, found running, or started by it."""

    temporal_address: str
    s3: S3Access
    notes: list[str]
    """One line per service: where it is and whether it was configured, reused or started."""
    started: list[ManagedServer] = field(default_factory=list)


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or LOOPBACK, int(port)


@asynccontextmanager
async def local_services(
    target: Target, state_dir: Path, *, reuse_default: bool
) -> AsyncIterator[LocalServices]:
    """Start what is missing, yield where everything is, stop what was started.

    Temporal: a configured address is used as is. Otherwise ``reuse_default``
    (``run``) reuses a server on 127.0.0.1:7233 or starts one there, so another
    terminal's ``filegate approvals`` finds it; without it (``demo``) a private
    server starts on a free port. S3: a configured endpoint is used as is,
    otherwise the embedded server starts on a free port. Both start in parallel.
    """
    settings = target.settings
    starting: list[ManagedServer] = []
    address = settings.temporal_address
    how = "configured"
    if not target.configured:
        host, port = _split_address(DEFAULT_TEMPORAL_ADDRESS)
        address, how = DEFAULT_TEMPORAL_ADDRESS, "found running, reused"
        if not (reuse_default and is_listening(host, port)):
            server = TemporalDevServer(
                state_dir / "temporal",
                host=host,
                port=port if reuse_default else None,
                namespace=settings.temporal_namespace,
            )
            address, how = server.address, "embedded dev server, started"
            starting.append(server)
    notes = [f"Temporal at {address} ({how})"]
    if settings.s3_endpoint:
        s3 = S3Access.from_settings(settings)
        notes.append(f"S3 at {s3.endpoint} (configured)")
    else:
        weed = S3DevServer(state_dir / "s3", buckets=[settings.s3_bucket])
        s3 = S3Access(weed.endpoint, weed.access_key, weed.secret_key, settings.s3_bucket)
        starting.append(weed)
        notes.append(f"S3 at {s3.endpoint} (embedded SeaweedFS, started)")
    services = LocalServices(address, s3, notes)
    launches = [asyncio.ensure_future(asyncio.to_thread(server.start)) for server in starting]
    try:
        outcomes = await asyncio.shield(asyncio.gather(*launches, return_exceptions=True))
        services.started = [s for s, out in zip(starting, outcomes, strict=True) if s.running]
        failures = [out for out in outcomes if isinstance(out, BaseException)]
        if failures:
            raise CliError(f"could not start a local service: {failures[0]}")
        yield services
    finally:
        # Every server we launched, even when Ctrl-C interrupted startup: let
        # the start threads finish first, then stop (a no-op for one that never
        # came up). main() ends with os._exit, so no atexit hook would catch it.
        await asyncio.gather(*launches, return_exceptions=True)
        await asyncio.gather(*(asyncio.to_thread(server.stop) for server in starting))


async def services_client(
    target: Target, services: LocalServices
) -> tuple[Client, ArtifactStore | None]:
    """A client of the services' Temporal carrying the codec of their S3, and that
    store (the in-process workers get the same one)."""
    settings = target.settings.model_copy(update={"temporal_address": services.temporal_address})
    client = await connect(settings, target.tls, artifacts=None)
    store = await open_store(services.s3)
    return with_payload_codec(client, store), store


def state_dir_for(settings: Settings, scratch: Path | None) -> Path:
    """``FILEGATE_STATE_DIR`` when set, else ``scratch`` (a temp dir), else the default."""
    if os.environ.get(ENV_PREFIX + "STATE_DIR", "").strip() or scratch is None:
        return settings.state_dir.resolve()
    return scratch


# =========================================================================== progress


def _one_line(text: str, width: int = 100) -> str:
    """The first two non-blank lines of ``text``, cut to ``width``, plus how many more."""
    lines = [part.strip() for part in text.strip().splitlines() if part.strip()]
    line = " | ".join(lines[:2])
    line = line if len(line) <= width else line[: width - 3] + "..."
    return line + (f" (+{len(lines) - 2} more lines)" if len(lines) > 2 else "")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        b.get("text", f"[{b.get('type', 'block')}]") for b in content if isinstance(b, dict)
    )


def _args_text(args: dict[str, Any], width: int = 80) -> str:
    text = json.dumps(args, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


Approval = dict[str, Any]
"""A pending approval as the ``pending_approvals`` query returns it (id, tool, args, rule...)."""


class Progress:
    """Prints a run as it happens: tool calls, their results, approvals, the answer.

    Fed from the ``transcript`` and ``pending_approvals`` queries, so it shows the
    same thing for in-process and remote workers.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.seen = 0
        self.tool_names: dict[str, str] = {}
        self.approvals_seen: set[str] = set()

    def transcript(self, messages: list[dict[str, Any]]) -> None:
        if len(messages) < self.seen:  # history was compacted: start over quietly
            self.seen = len(messages)
        for message in messages[self.seen :]:
            self._message(message)
        self.seen = len(messages)

    def _message(self, message: dict[str, Any]) -> None:
        role = message.get("role")
        text = _content_text(message.get("content", ""))
        if role == "user":
            self.write(f"user: {_one_line(text)}")
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                self.tool_names[call["id"]] = call["name"]
                self.write(f"  -> {call['name']} {_args_text(call.get('args', {}))}")
            if text.strip():
                self.write(f"assistant: {_one_line(text)}")
        elif role == "tool":
            name = self.tool_names.get(message.get("tool_call_id", ""), "tool")
            status = "ok" if message.get("status", "success") == "success" else "ERROR"
            self.write(f"  <- {name} [{status}] {_one_line(text)}")

    def new_approvals(self, pending: list[Approval]) -> list[Approval]:
        fresh = [a for a in pending if a["id"] not in self.approvals_seen]
        self.approvals_seen.update(a["id"] for a in fresh)
        return fresh


async def follow(
    handle: WorkflowHandle[Any, AgentResult],
    progress: Progress,
    on_approval: Callable[[Approval], Awaitable[None]],
    interval: float = 0.2,
) -> AgentResult:
    """Wait for the run's result while printing progress and reporting new approvals."""
    result_task: asyncio.Task[AgentResult] = asyncio.create_task(handle.result())
    try:
        while not result_task.done():
            try:
                # Approvals first: the transcript read after them already holds
                # the tool calls they belong to, so output stays in order.
                pending = await handle.query(PENDING_QUERY, rpc_timeout=QUERY_TIMEOUT)
                progress.transcript(await handle.query(TRANSCRIPT_QUERY, rpc_timeout=QUERY_TIMEOUT))
                for approval in progress.new_approvals(pending):
                    await on_approval(approval)
            except (RPCError, WorkflowQueryFailedError) as exc:
                log.debug("progress query failed: %s", exc)
            await asyncio.wait({result_task}, timeout=interval)
        result = result_task.result()
    finally:
        result_task.cancel()
    progress.transcript(result.transcript)
    return result


def _say(text: str = "") -> None:
    print(text, flush=True)


def _failure_text(exc: BaseException) -> str:
    """The innermost cause's message: what actually went wrong."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return getattr(exc, "message", None) or str(exc)


# =========================================================================== run


def parse_model(text: str) -> ModelSpec:
    """``scripted:FILE`` | ``openai:NAME`` | ``anthropic:NAME`` -> a ModelSpec."""
    from filegate.activities.providers.scripted import load_script
    from filegate.kernel.messages import ModelSpec

    provider, sep, name = text.partition(":")
    if not sep or not name or provider not in ("scripted", "openai", "anthropic"):
        raise CliError(f"--model {text!r}: use scripted:FILE, openai:NAME or anthropic:NAME", 2)
    if provider != "scripted":
        return ModelSpec(provider=provider, name=name)  # type: ignore[arg-type]
    path = Path(name).expanduser().resolve()
    try:
        load_script(path.read_text(encoding="utf-8"), f"file {path}")
    except OSError as exc:
        raise CliError(f"cannot read script {path}: {exc.strerror or exc}", 2) from None
    except Exception as exc:  # load_script raises a non-retryable ApplicationError
        raise CliError(_failure_text(exc), 2) from None
    return ModelSpec(provider="scripted", name=str(path))


def load_permissions(path: str | None) -> list[FilesystemPermission]:
    """``--permissions FILE``: a JSON list of ``{operations, paths, mode}``."""
    from filegate.kernel.permissions import FilesystemPermission

    if not path:
        return []
    try:
        data = json.loads(_read_file(path, "permissions file"))
    except json.JSONDecodeError as exc:
        raise CliError(f"permissions file {path} is not valid JSON: {exc}", 2) from None
    if not isinstance(data, list):
        raise CliError(f"permissions file {path} must hold a JSON list of rules", 2)
    try:
        return [FilesystemPermission.model_validate(rule) for rule in data]
    except ValueError as exc:
        raise CliError(f"invalid rule in {path}: {exc}", 2) from None


def _approval_context(approval: Approval) -> str:
    """`` in DIR`` for execute (where the command would run), else ``""``."""
    cwd = approval.get("cwd")
    return f" in {cwd}" if cwd else ""


def _rule_text(rule: dict[str, Any] | None) -> str:
    """The matched rule in one line (permission rule or interrupt_on entry)."""
    rule = rule or {}
    if rule.get("description"):
        return str(rule["description"])
    return f"{rule.get('mode', '?')} {', '.join(rule.get('paths', []))}"


def _approval_hint(workflow_id: str) -> Callable[[Approval], Awaitable[None]]:
    async def show(approval: Approval) -> None:
        _say(
            f"  ?? approval {approval['id']} needed: {approval['tool']} "
            f"{_args_text(approval['args'])}{_approval_context(approval)}\n"
            f"     decide from another terminal: filegate approve {approval['id']} "
            f"--workflow {workflow_id}  (or reject / respond / edit)"
        )

    return show


async def _run_command(args: argparse.Namespace) -> int:
    from filegate.kernel.permissions import check_execute_config
    from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec

    target = target_from(args)
    model = parse_model(args.model)
    rules = load_permissions(args.permissions)
    root = Path(args.root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    if args.shell:
        try:
            check_execute_config(rules, can_execute=True)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
    workflow_id = args.workflow_id or f"filegate-run-{uuid.uuid4().hex[:12]}"
    # Queues derive from the workflow id: re-running with the same --workflow-id
    # attaches to a still-running thread and serves it again.
    agent_queue = f"{workflow_id}.agent"
    tools_queue = f"{workflow_id}.tools"
    name = "workspace"
    backend = make_backend("local-shell" if args.shell else "filesystem", root)
    ref = BackendRef(
        kind="remote", name=name, task_queue=tools_queue,
        can_execute=args.shell, shell_path=str(root) if args.shell else None,
    )  # fmt: skip
    input = AgentInput(
        task=args.task, model=model, backend=BackendSpec(default=ref), permissions=rules
    )
    state_dir = target.settings.state_dir.resolve()
    _say(f"workflow id: {workflow_id}")
    async with local_services(target, state_dir, reuse_default=True) as services:
        for line in services.notes:
            _say(line)
        client, artifacts = await services_client(target, services)
        async with in_process_workers(
            client, agent_queue, tools_queue, {name: backend}, state_dir / "journal" / name,
            artifacts=artifacts,
        ):  # fmt: skip
            handle = await client.start_workflow(
                AgentWorkflow.run, input, id=workflow_id, task_queue=agent_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )  # fmt: skip
            try:
                result = await follow(handle, Progress(_say), _approval_hint(workflow_id))
            except WorkflowFailureError as exc:
                raise CliError(f"workflow {workflow_id} failed: {_failure_text(exc)}") from None
    if args.transcript:
        out = Path(args.transcript).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result.transcript, indent=2, ensure_ascii=False) + "\n")
    _say(
        f"completed: {result.stop_reason} after {result.steps} model calls, "
        f"{result.tool_calls} tool calls ({result.tool_errors} errors), "
        f"{result.approvals} approvals"
    )
    _say(f"final answer: {result.final_answer}")
    return 0


# =========================================================================== approvals


RUNNING_AGENTS = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def pending_approvals(client: Client, workflow_id: str | None = None) -> list[dict[str, Any]]:
    """Pending approvals of every running AgentWorkflow (or of one), contract §10 shape."""
    query = RUNNING_AGENTS
    if workflow_id:
        query += f" AND WorkflowId = {_quoted(workflow_id)}"
    ids = sorted({wf.id async for wf in client.list_workflows(query)})

    async def of(wf_id: str) -> list[Approval]:
        try:
            found: list[Approval] = await client.get_workflow_handle(wf_id).query(
                PENDING_QUERY, rpc_timeout=QUERY_TIMEOUT
            )
            return found
        except (RPCError, WorkflowQueryFailedError) as exc:
            print(f"filegate: skipped {wf_id}: {exc}", file=sys.stderr)
            return []

    found = await asyncio.gather(*(of(wf_id) for wf_id in ids))
    return [
        {
            "workflow_id": wf_id,
            **{key: a.get(key) for key in ("id", "tool", "args", "rule")},
            **({"cwd": a["cwd"]} if a.get("cwd") else {}),
        }
        for wf_id, approvals in zip(ids, found, strict=True)
        for a in approvals
    ]


async def _approvals_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    client = await connect(target.settings, target.tls)
    items = await pending_approvals(client, args.workflow)
    if args.json:
        _say(json.dumps(items, indent=2, ensure_ascii=False))
        return 0
    if not items:
        _say("no pending approvals")
    for item in items:
        _say(
            f"{item['workflow_id']}  {item['id']}  {item['tool']} {_args_text(item['args'])}"
            f"{_approval_context(item)}  (rule: {_rule_text(item['rule'])})"
        )
    return 0


def decision_payload(args: argparse.Namespace) -> dict[str, Any]:
    """The ``decide`` payload (the workflow's Decision model: id, decision, args/reason/message)."""
    payload: dict[str, Any] = {"id": args.id, "decision": args.decision}
    for key in ("reason", "message"):
        if getattr(args, key, None) is not None:
            payload[key] = getattr(args, key)
    if args.decision == "edit":
        try:
            edited = json.loads(args.args)
        except json.JSONDecodeError as exc:
            raise CliError(f"--args is not valid JSON: {exc}", 2) from None
        if not isinstance(edited, dict):
            raise CliError("--args must be a JSON object of tool arguments", 2)
        payload["args"] = edited
    return payload


async def _decide_command(args: argparse.Namespace) -> int:
    decision = decision_payload(args)
    target = target_from(args)
    client = await connect(target.settings, target.tls)
    handle = client.get_workflow_handle(args.workflow)
    try:
        ack: dict[str, Any] = await handle.execute_update(
            DECIDE_UPDATE, decision, rpc_timeout=timedelta(seconds=args.timeout)
        )
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise CliError(
            f"no worker answered for {args.workflow} within {args.timeout:g} s: is the "
            "`filegate run` (or agent worker) serving it still running? Check "
            "`filegate approvals` before deciding again."
        ) from None
    except WorkflowUpdateFailedError as exc:
        raise CliError(
            f"{args.decision} refused by {args.workflow}: {_failure_text(exc)}"
        ) from None
    except RPCError as exc:
        raise CliError(f"cannot reach workflow {args.workflow}: {exc.message}") from None
    _say(f"{ack['decision']}: approval {ack['id']} of {args.workflow}")
    return 0


async def _status_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    client = await connect(target.settings, target.tls)
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        status = await handle.query(STATUS_QUERY, rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError) as exc:
        raise CliError(f"cannot query workflow {args.workflow_id}: {_failure_text(exc)}") from None
    _say(json.dumps(status, indent=2, ensure_ascii=False))
    return 0


# =========================================================================== demo

DEMO_TASK = "Fix greet() in src/app.py, note a plan, write a report, and keep out of the vault."

DEMO_APP = '''"""A tiny app the demo agent fixes."""


def greet(name):
    return None  # TODO: say hello


if __name__ == "__main__":
    print(greet("filegate"))
'''
DEMO_FIX = ("return None  # TODO: say hello", 'return f"hello, {name}!"')
DEMO_REPORT = "# Report\n\ngreet() now says hello.\n"
DEMO_KEYS = "vault keys: do not touch\n"
DEMO_FINAL = "greet() is fixed, the report is written (approved), and the vault is untouched."

DEMO_RULES = [
    {"operations": ["write"], "paths": ["/vault/**"], "mode": "deny"},
    {"operations": ["write"], "paths": ["/docs/**"], "mode": "interrupt"},
]


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


DEMO_BIG_LINES = 2000
"""Lines of 100 chars the large command prints: over the offload threshold even
after the shell's 100 000-byte cap."""


def demo_script(python: str) -> dict[str, Any]:
    """The scripted agent: every tool, one denied write, one write awaiting approval,
    one result too large for history that is read back from S3."""
    from filegate.activities.tool_types import activity_call_id
    from filegate.activities.tools import LARGE_RESULTS_DIR

    big = f"for i in range({DEMO_BIG_LINES}): print(f'L{{i:05d}}' + '.' * 93)"
    turns: list[dict[str, Any]] = [
            {"tool_calls": [
                _call("ls1", "ls", path="/"),
                _call("glob1", "glob", pattern="**/*.py"),
                _call("grep1", "grep", pattern="TODO", output_mode="content"),
            ]},
            {"tool_calls": [_call("read1", "read_file", file_path="/src/app.py")]},
            {"tool_calls": [
                _call("edit1", "edit_file", file_path="/src/app.py",
                      old_string=DEMO_FIX[0], new_string=DEMO_FIX[1]),
                _call("write1", "write_file", file_path="/notes/plan.md",
                      content="1. fix greet()\n2. write the report\n"),
            ]},
            {"tool_calls": [
                _call("denied1", "write_file", file_path="/vault/leaked.txt", content="oops"),
                _call("approved1", "write_file", file_path="/docs/report.md", content=DEMO_REPORT),
            ]},
            {"tool_calls": [
                _call("exec1", "execute", command=f"{shlex.quote(python)} src/app.py"),
                _call("read2", "read_file", file_path="/docs/report.md"),
            ]},
            {"tool_calls": [
                _call("big1", "execute", command=f"{shlex.quote(python)} -c {shlex.quote(big)}"),
            ]},
    ]  # fmt: skip
    # The stub names the result by its activity call id: model step (1-based), position.
    stub = LARGE_RESULTS_DIR + activity_call_id(len(turns), 0, "big1")
    turns += [
        {"tool_calls": [
            _call("bigread1", "read_file", file_path=stub, offset=500, limit=2),
            _call("delete1", "delete", file_path="/notes"),
        ]},
        # Calls of one turn may run concurrently: look only after the delete.
        {"tool_calls": [_call("glob2", "glob", pattern="**/*.md")]},
        {"content": DEMO_FINAL},
    ]  # fmt: skip
    return {"turns": turns}


@dataclass
class DemoDirs:
    """The demo's three backend roots: a shell workspace and two routed directories."""

    workspace: Path
    docs: Path
    vault: Path

    @classmethod
    def create(cls, base: Path) -> DemoDirs:
        dirs = cls(base / "workspace", base / "docs", base / "vault")
        (dirs.workspace / "src").mkdir(parents=True)
        (dirs.workspace / "src" / "app.py").write_text(DEMO_APP)
        dirs.docs.mkdir()
        dirs.vault.mkdir()
        (dirs.vault / "keys.txt").write_text(DEMO_KEYS)
        return dirs


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def demo_checks(
    result: AgentResult, dirs: DemoDirs, approved: list[str], stored: list[str]
) -> list[Check]:
    """Every step's expected outcome, from the transcript and the real directories."""
    from filegate.activities.tool_types import TOOL_ORDER

    out = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
    # Keys are <namespace>/<workflow id>/<name>: a large result's name is its tool
    # call id (one component); transcripts live under transcript/ (contract §8).
    names = [key.split("/", 2)[-1] for key in stored]
    large = [name for name in names if "/" not in name]
    transcripts = [name for name in names if name.startswith("transcript/")]

    def text(call_id: str) -> str:
        return _content_text(out.get(call_id, {}).get("content", ""))

    def ok(call_id: str) -> bool:
        return out.get(call_id, {}).get("status") == "success"

    used = {
        call["name"]
        for m in result.transcript
        if m["role"] == "assistant"
        for call in m.get("tool_calls") or []
    }
    app = _read(dirs.workspace / "src" / "app.py") or ""
    listing = set(text("ls1").splitlines())
    return [
        Check("ls shows the workspace and both routes",
              ok("ls1") and {"/src/", "/docs/", "/vault/"} <= listing, text("ls1")),
        Check("glob finds the Python file", text("glob1") == "/src/app.py", text("glob1")),
        Check("grep finds the TODO", "/src/app.py" in text("grep1") and "TODO" in text("grep1")),
        Check("read_file shows the bug", ok("read1") and "return None" in text("read1")),
        Check("edit_file fixed the file on disk",
              ok("edit1") and DEMO_FIX[1] in app and "TODO" not in app),
        Check("write_file wrote the plan", ok("write1")),
        Check("write to /vault was DENIED and nothing was written",
              not ok("denied1") and "denied" in text("denied1").lower()
              and not (dirs.vault / "leaked.txt").exists()
              and _read(dirs.vault / "keys.txt") == DEMO_KEYS, _one_line(text("denied1"))),
        Check("write to /docs waited for approval, approved by signal, then ran",
              len(approved) == 1 and result.approvals == 1 and ok("approved1")
              and _read(dirs.docs / "report.md") == DEMO_REPORT),
        Check("execute ran the fixed app",
              "hello, filegate!" in text("exec1") and "exit code 0" in text("exec1"),
              _one_line(text("exec1"))),
        Check("read_file reads the approved report", ok("read2") and "greet()" in text("read2")),
        Check("large execute output went to S3; history holds a short stub",
              ok("big1") and "/large_tool_results/" in text("big1")
              and len(text("big1")) < 5000 and len(large) == 1,
              f"stub {len(text('big1'))} chars; S3 objects: {stored}"),
        Check("the model got the conversation by reference (transcripts in S3)",
              len(transcripts) == result.steps, f"{len(transcripts)} transcript objects, "
              f"{result.steps} model calls"),
        Check("read_file pages the large result back from S3",
              ok("bigread1") and "L00500" in text("bigread1") and "L00499" not in text("bigread1"),
              _one_line(text("bigread1"))),
        Check("delete removed /notes", ok("delete1") and not (dirs.workspace / "notes").exists()),
        Check("glob sees the report and not the deleted plan",
              "/docs/report.md" in text("glob2") and "plan.md" not in text("glob2")),
        Check("every tool was used", used == set(TOOL_ORDER), ", ".join(sorted(used))),
        Check("the agent finished with its answer",
              result.stop_reason == "final_answer" and result.final_answer == DEMO_FINAL),
    ]  # fmt: skip


async def take_stored_results(store: ArtifactStore | None, workflow_id: str) -> list[str]:
    """Keys of what the run left in S3 (large results, transcripts), which are then
    deleted: a demo against a configured S3 must not leave objects behind."""
    if store is None:
        return []
    keys = await asyncio.to_thread(store.list_thread, workflow_id)
    await asyncio.to_thread(store.delete_thread, workflow_id)
    return keys


async def run_demo(
    client: Client, dirs: DemoDirs, journal: Path, artifacts: ArtifactStore | None
) -> tuple[AgentResult, list[str], list[str]]:
    """Run the scripted agent with in-process workers; approve its approval by signal.

    Returns the result, the approval ids approved, and the S3 keys of offloaded results.
    """
    suffix = uuid.uuid4().hex[:8]
    agent_queue, tools_queue = f"filegate-demo-{suffix}", f"filegate-demo-{suffix}-tools"
    from filegate.backends.filesystem import FilesystemBackend
    from filegate.backends.local_shell import LocalShellBackend
    from filegate.kernel.messages import ModelSpec
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.workflows import (
        AgentInput,
        AgentWorkflow,
        BackendRef,
        BackendSpec,
        Decision,
        RouteSpec,
    )

    backends: dict[str, BackendProtocol] = {
        "workspace": LocalShellBackend(dirs.workspace),
        "docs": FilesystemBackend(dirs.docs),
        "vault": FilesystemBackend(dirs.vault),
    }

    def ref(name: str, shell: bool = False) -> BackendRef:
        return BackendRef(
            kind="remote", name=name, task_queue=tools_queue, can_execute=shell,
            shell_path=str(dirs.workspace) if shell else None,
        )  # fmt: skip

    input = AgentInput(
        task=DEMO_TASK,
        model=ModelSpec(provider="scripted", options={"script": demo_script(sys.executable)}),
        backend=BackendSpec(
            default=ref("workspace", shell=True),
            routes=[RouteSpec(prefix="/docs/", backend=ref("docs")),
                    RouteSpec(prefix="/vault/", backend=ref("vault"))],
        ),
        permissions=[FilesystemPermission.model_validate(rule) for rule in DEMO_RULES],
    )  # fmt: skip
    approved: list[str] = []
    workflow_id = f"filegate-demo-{suffix}"
    async with in_process_workers(
        client, agent_queue, tools_queue, backends, journal, artifacts=artifacts
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=agent_queue
        )
        _say(f"[demo] workflow {workflow_id} started")

        async def approve(approval: Approval) -> None:
            approval_id = approval["id"]
            args = _args_text(approval["args"])
            _say(f"  ?? approval {approval_id} pending: {approval['tool']} {args}")
            await handle.signal(
                AgentWorkflow.decide_signal, Decision(id=approval_id, decision="approve")
            )
            approved.append(approval_id)
            _say(f"  !! approved {approval_id} by signal")

        result = await asyncio.wait_for(follow(handle, Progress(_say), approve), 60)
    return result, approved, await take_stored_results(artifacts, workflow_id)


async def _demo_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="filegate-demo-") as scratch:
        base = Path(scratch)
        dirs = DemoDirs.create(base)
        state_dir = state_dir_for(target.settings, base / "state")
        _say("[demo] starting services (what is not already configured)...")
        async with local_services(target, state_dir, reuse_default=False) as services:
            for line in services.notes:
                _say(f"[demo] {line}")
            client, artifacts = await services_client(target, services)
            _say(f"[demo] workspace {dirs.workspace}; /docs and /vault are routed directories")
            _say("[demo] rules: write /vault/** -> deny; write /docs/** -> interrupt (approval)")
            try:
                result, approved, stored = await run_demo(client, dirs, base / "journal", artifacts)
            except (TimeoutError, WorkflowFailureError) as exc:
                raise CliError(
                    f"demo run did not complete: {_failure_text(exc) or 'timeout'}"
                ) from None
            checks = demo_checks(result, dirs, approved, stored)
            _say("[demo] stopping what the demo started...")
    _say("")
    _say("Summary")
    for check in checks:
        detail = f"  ({_one_line(check.detail, 70)})" if check.detail and not check.ok else ""
        _say(f"  {'PASS' if check.ok else 'FAIL'}  {check.name}{detail}")
    failed = [c for c in checks if not c.ok]
    elapsed = time.monotonic() - began
    if failed:
        _say(f"demo FAILED: {len(failed)} of {len(checks)} checks failed ({elapsed:.1f} s)")
        return 1
    _say(f"demo OK: {len(checks)} checks passed in {elapsed:.1f} s")
    return 0


# =========================================================================== worker command


async def _worker_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    settings = target.settings
    if args.role == "tools" and not args.task_queue:
        raise CliError("--task-queue is required for --role tools", 2)
    client = await connect(settings, target.tls, artifacts=None)
    # One store for the codec and the activities: transcripts / large results.
    artifacts = await configured_store(settings)
    client = with_payload_codec(client, artifacts)
    if args.role == "agent":
        queue = args.task_queue or os.environ.get("FILEGATE_TASK_QUEUE") or settings.task_queue
        hosted: dict[str, Any] = {}
        if args.local_backend:
            name, backend, journal = _backend_from_args(args, settings)
            hosted = {"backends": {name: backend}, "journal_dir": journal}
        worker = agent_worker(client, queue, artifacts=artifacts, **hosted)
    else:
        name, backend, journal = _backend_from_args(args, settings)
        options: dict[str, Any] = {}
        if args.max_activities_per_second is not None:
            options["max_task_queue_activities_per_second"] = args.max_activities_per_second
        worker = tools_worker(
            client, args.task_queue, {name: backend}, journal, artifacts=artifacts, **options
        )
    await run_until_stopped(worker)
    return 0


def _backend_from_args(
    args: argparse.Namespace, settings: Settings
) -> tuple[str, BackendProtocol, Path]:
    """The backend ``--backend/--root/--name`` describe, and its journal directory."""
    name = args.name or args.backend
    try:
        backend = make_backend(
            args.backend, args.root, namespace=args.store_namespace, settings=settings
        )
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except RuntimeError as exc:  # e.g. the sandbox without a usable bwrap
        raise CliError(f"{args.backend} backend unavailable: {exc}") from None
    return name, backend, Path(args.journal_dir or settings.state_dir / "journal" / name)


# =========================================================================== parser


def _connection_options() -> argparse.ArgumentParser:
    """Options every command that talks to Temporal shares."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("Temporal connection")
    group.add_argument(
        "--address", help="frontend host:port (default: TEMPORAL_ADDRESS or 127.0.0.1:7233)"
    )
    group.add_argument("--namespace", help="namespace (default: TEMPORAL_NAMESPACE or default)")
    group.add_argument("--tls-cert", help="client certificate (PEM) for mTLS")
    group.add_argument("--tls-key", help="client private key (PEM) for mTLS")
    group.add_argument("--tls-ca", help="server CA certificate (PEM)")
    return parent


def _add_worker_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("worker", parents=[common], help="run a Temporal worker")
    parser.add_argument("--role", choices=("agent", "tools"), required=True)
    parser.add_argument("--backend", choices=BACKEND_KINDS, default="filesystem")
    parser.add_argument("--root", help="workspace directory of a filesystem/local-shell backend")
    parser.add_argument(
        "--store-namespace", help="store backend: S3 namespace such as users/alice (FILEGATE_S3_*)"
    )
    parser.add_argument("--task-queue", help="task queue (agent default: FILEGATE_TASK_QUEUE)")
    parser.add_argument("--name", help="backend name workflows use (default: the kind)")
    parser.add_argument(
        "--local-backend",
        action="store_true",
        help="agent role: also host the --backend/--root backend for kind=local refs "
        "(its tools run as local activities in this worker, skipping task-queue trips)",
    )
    parser.add_argument("--journal-dir", help="idempotency journal directory")
    parser.add_argument(
        "--max-activities-per-second",
        type=float,
        help="tools role: rate limit of the whole task queue, enforced by the Temporal server "
        "across all its workers (Worker max_task_queue_activities_per_second)",
    )
    parser.set_defaults(handler=_worker_command)


def _add_run_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "run", parents=[common], help="run one agent task on a directory (contract §10)"
    )
    parser.add_argument("task", help="the task for the agent")
    parser.add_argument(
        "--model", required=True, help="scripted:FILE | openai:NAME | anthropic:NAME"
    )
    parser.add_argument("--root", required=True, help="directory the agent works in")
    parser.add_argument("--permissions", help="JSON file: list of {operations, paths, mode}")
    parser.add_argument("--transcript", help="write the final transcript JSON here")
    parser.add_argument("--workflow-id", help="workflow id (default: generated and printed)")
    parser.add_argument("--shell", action="store_true", help="LocalShell backend (adds execute)")
    parser.set_defaults(handler=_run_command)


def _add_demo_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "demo", parents=[common], help="self-checking demo: every tool, a deny, an approval"
    )
    parser.set_defaults(handler=_demo_command)


def _add_approval_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    listing = sub.add_parser("approvals", parents=[common], help="list pending approvals")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.add_argument("--workflow", help="only this workflow")
    listing.set_defaults(handler=_approvals_command)

    helps = {
        "approve": "run the pending call as asked",
        "reject": "do not run the call; tell the model (optionally why)",
        "respond": "do not run the call; MESSAGE becomes the tool result",
        "edit": "run the call with reviewer-supplied arguments",
    }
    for kind, text in helps.items():
        parser = sub.add_parser(kind, parents=[common], help=text)
        parser.add_argument("id", help="approval id (see `filegate approvals`)")
        parser.add_argument("--workflow", required=True, help="workflow id")
        parser.add_argument(
            "--timeout", type=float, default=DECIDE_TIMEOUT,
            help=f"seconds to wait for a worker to accept (default {DECIDE_TIMEOUT:g})",
        )  # fmt: skip
        if kind == "reject":
            parser.add_argument("--reason", help="reason passed on to the model")
        elif kind == "respond":
            parser.add_argument("--message", required=True, help="text of the tool result")
        elif kind == "edit":
            parser.add_argument("--args", required=True, help="replacement tool arguments (JSON)")
        parser.set_defaults(handler=_decide_command, decision=kind)

    status = sub.add_parser("status", parents=[common], help="print a workflow's status query")
    status.add_argument("workflow_id")
    status.set_defaults(handler=_status_command)


def _add_ui_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("ui", parents=[common], help="approval web UI (the `ui` extra)")
    parser.add_argument("--host", default=LOOPBACK, help="interface to listen on")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on")
    parser.set_defaults(handler=_ui_command)


async def _ui_command(args: argparse.Namespace) -> int:
    try:  # the web stack is an optional extra: import it only for this command
        from filegate.workflows.ui import ui_command
    except ImportError as exc:
        raise CliError(f"the web UI needs: pip install 'filegate[ui]' ({exc})", 2) from None
    return await ui_command(args)


COMMANDS: dict[str, Callable[[Any, argparse.ArgumentParser], None]] = {
    "worker": _add_worker_parser,
    "run": _add_run_parser,
    "demo": _add_demo_parser,
    "approvals": _add_approval_parsers,
    "ui": _add_ui_parser,
}
"""Command group -> function adding its parser(s); extend to add commands."""


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or "Filegate"
    parser = argparse.ArgumentParser(prog="filegate", description=doc.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    common = _connection_options()
    for add in COMMANDS.values():
        add(sub, common)
    return parser


async def _dispatch(args: argparse.Namespace) -> int:
    try:
        code: int = await args.handler(args)
    except CliError as exc:
        print(f"filegate: {exc}", file=sys.stderr, flush=True)
        return exc.code
    return code


def run_cli(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the command; returns the exit code (no process exit)."""
    args_list = list(argv)
    # `python worker.py --role agent` is shorthand for `filegate worker --role agent`.
    if args_list and args_list[0].startswith("--role"):
        args_list.insert(0, "worker")
    args = build_parser().parse_args(args_list)
    quiet = args.command not in ("worker",) and not args.verbose
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return asyncio.run(_dispatch(args))
    except KeyboardInterrupt:
        print("filegate: interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point. Called without ``argv`` it ends the process itself with
    ``os._exit``: a connected temporalio client can crash the interpreter at exit
    (sdk-python issue 300), and everything this CLI started is stopped by now."""
    if argv is not None:
        return run_cli(argv)
    code = run_cli(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
