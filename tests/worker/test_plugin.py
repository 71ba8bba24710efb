"""``FilegatePlugin``: clients and workers configured through the plugin alone.

On the session's Temporal dev server (and S3 for the codec): ``AgentWorkflow``
on a worker that lists nothing itself, with a local backend and a remote one;
the docs' own-workflow host (``docs/examples/file_tools_host.py``); large
payloads leaving history as S3 references when the settings configure a store;
a worker's own workflows and activities kept next to Filegate's. The pieces
(converter, runner, refusals) are checked without a server.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio import activity, workflow

from tests.scripting import scripted, uid

# The sandbox re-imports this module for EchoWorkflow: share the rest with it.
with workflow.unsafe.imports_passed_through():
    from minio import Minio
    from temporalio.api.common.v1 import Payload
    from temporalio.client import Client
    from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
    from temporalio.converter import (
        DataConverter,
        DefaultPayloadConverter,
        PayloadCodec,
        SerializationContext,
        WithSerializationContext,
    )
    from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

    from filegate import FilegatePlugin
    from filegate.activities.history import (
        CODEC_ENCODING,
        CODEC_THREAD,
        ArtifactPayloadCodec,
        InlineMarkingPayloadConverter,
    )
    from filegate.backends.artifacts import ArtifactStore
    from filegate.backends.filesystem import FilesystemBackend
    from filegate.backends.settings import JournalSettings, Settings
    from filegate.devstack.s3 import S3DevServer
    from filegate.devstack.servers import TemporalDevServer
    from filegate.plugin import with_filegate_codec
    from filegate.wiring.connection import ConfigError, with_payload_codec
    from filegate.wiring.roles import WorkerRole, agent_role, tools_role
    from filegate.workflows import AgentInput, AgentResult, AgentWorkflow, BackendRef, BackendSpec
    from filegate.workflows.inputs import RouteSpec
    from filegate.workflows.operation import OperationWorkflow
    from filegate.workflows.runner import ContextFreeSandboxRunner, filegate_runner
    from filegate.workflows.session import SessionWorkflow
    from tests.activities.test_stubs import _load_example
    from tests.scripting import calls

LOCAL = BackendRef(kind="local", name="ws")

QUIET = Settings()
"""No S3 and the default model profiles, whatever the test process's environment says."""


def tool_results(result: AgentResult) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in result.transcript if m["role"] == "tool"}


async def plugin_client(server: TemporalDevServer, plugin: FilegatePlugin) -> Client:
    return await Client.connect(server.address, namespace=server.namespace, plugins=[plugin])


# -- the pieces, without a server ------------------------------------------------------


class _OtherPayloadConverter(DefaultPayloadConverter):
    """Stands for another plugin's converter (``OpenAIAgentsPlugin``'s)."""


class _ForeignCodec(PayloadCodec):
    async def encode(self, payloads: Any) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Any) -> list[Payload]:
        return list(payloads)


class _ContextCodec(_ForeignCodec, WithSerializationContext):
    """A codec that reads the serialization context (keyed by workflow, say)."""

    def with_context(self, context: SerializationContext) -> _ContextCodec:
        return _ContextCodec()


STORE = cast(ArtifactStore, object())
"""The codec only keeps its store; nothing here reaches S3."""


def test_the_converter_is_filegates_and_another_plugins_is_kept() -> None:
    from filegate.activities.history import SharedPayloadConverter

    plain = with_filegate_codec(None, None)
    assert plain.payload_converter_class is SharedPayloadConverter
    assert plain.payload_codec is None
    coded = with_filegate_codec(pydantic_data_converter, STORE)
    assert coded.payload_converter_class is InlineMarkingPayloadConverter
    assert isinstance(coded.payload_codec, ArtifactPayloadCodec)
    assert coded.payload_codec.store is STORE
    other = DataConverter(payload_converter_class=_OtherPayloadConverter)
    kept = with_filegate_codec(other, STORE)
    assert kept.payload_converter_class is _OtherPayloadConverter
    assert isinstance(kept.payload_codec, ArtifactPayloadCodec)
    with pytest.raises(ConfigError, match="already has a payload codec"):
        with_filegate_codec(DataConverter(payload_codec=_ForeignCodec()), STORE)
    # Without a store, someone else's codec stays as it is.
    assert isinstance(
        with_filegate_codec(DataConverter(payload_codec=_ForeignCodec()), None).payload_codec,
        _ForeignCodec,
    )


def test_the_runner_passes_filegate_through_and_reads_the_converter() -> None:
    converter = with_filegate_codec(None, STORE)
    runner = filegate_runner(SandboxedWorkflowRunner(), converter)
    assert type(runner) is ContextFreeSandboxRunner
    assert isinstance(runner, SandboxedWorkflowRunner)
    passed = runner.restrictions.passthrough_modules
    assert {"filegate.kernel", "filegate.workflows.file_tools", "wcmatch"} <= passed
    # A converter that reads the context keeps the stock sandbox (with the modules).
    aware = filegate_runner(None, DataConverter(payload_codec=_ContextCodec()))
    assert type(aware) is SandboxedWorkflowRunner
    assert "filegate.kernel" in aware.restrictions.passthrough_modules
    unsandboxed = UnsandboxedWorkflowRunner()
    assert filegate_runner(unsandboxed, converter) is unsandboxed


def test_backends_need_a_journal() -> None:
    with pytest.raises(ValueError, match="journal_dir"):
        FilegatePlugin(backends={"ws": FilesystemBackend("/tmp")}, settings=QUIET)


@pytest.mark.services
async def test_a_worker_whose_client_lacks_the_codec_is_refused(temporal_client: Client) -> None:
    """The plugin on a worker only, with a store, on a client without the codec: this
    worker could not read the references the other processes write."""
    plugin = FilegatePlugin(artifacts=STORE, settings=QUIET)
    with pytest.raises(ConfigError, match="no Filegate payload codec"):
        Worker(temporal_client, task_queue=uid("q"), workflows=[EchoWorkflow], plugins=[plugin])


# -- on the server -----------------------------------------------------------------------


@pytest.mark.services
async def test_agent_workflow_runs_on_a_worker_configured_by_the_plugin(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """(a) The agent worker lists nothing: AgentWorkflow, the model activity and the
    local backend's tools come from the plugin; ``/shared/`` is a tools worker's."""
    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    (shared / "readme.md").write_text("shared notes\n")
    agent = FilegatePlugin(
        agent=True,
        backends={"ws": FilesystemBackend(local)},
        journal_dir=tmp_path / "j-agent",
        settings=QUIET,
    )
    tools = FilegatePlugin(
        backends={"shared": FilesystemBackend(shared)},
        journal_dir=tmp_path / "j-tools",
        settings=QUIET,
    )
    agent_client = await plugin_client(temporal_server, agent)
    tools_client = await plugin_client(temporal_server, tools)
    agent_q, tools_q = uid("agent"), uid("tools")
    model = scripted(
        calls(("w", "write_file", {"file_path": "/a.txt", "content": "alpha\n"})),
        calls(("r", "read_file", {"file_path": "/shared/readme.md"})),
        {"content": "done"},
    )
    backend = BackendSpec(
        default=BackendRef(kind="local", name="ws"),
        routes=[
            RouteSpec(
                prefix="/shared/",
                backend=BackendRef(kind="remote", name="shared", task_queue=tools_q),
            )
        ],
    )
    workflow_id = uid("wf")
    agent_worker = Worker(agent_client, task_queue=agent_q)
    registered = agent_worker.config(active_config=True)
    assert AgentWorkflow in registered["workflows"]
    assert isinstance(registered.get("workflow_runner"), ContextFreeSandboxRunner)
    async with agent_worker, Worker(tools_client, task_queue=tools_q):
        result = await agent_client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="write, then read", model=model, backend=backend),
            id=workflow_id,
            task_queue=agent_q,
            execution_timeout=timedelta(minutes=1),
        )
    assert result.final_answer == "done"
    assert (local / "a.txt").read_text() == "alpha\n"
    assert "shared notes" in tool_results(result)["r"]
    history = await agent_client.get_workflow_handle(workflow_id).fetch_history()
    replayer = Replayer(workflows=[], plugins=[FilegatePlugin(agent=True, settings=QUIET)])
    await replayer.replay_workflow(history)


@pytest.mark.services
async def test_the_own_workflow_host_runs_on_plugin_workers(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """(b) docs/examples/file_tools_host.py's ``main``: ToolListWorkflow on a worker
    that lists only it, its tools on a worker that lists nothing."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("remember\n")
    steps = [
        {"id": "w", "name": "write_file", "args": {"file_path": "/a.txt", "content": "alpha\n"}},
        {"id": "r", "name": "read_file", "args": {"file_path": "/notes.md"}},
        {"id": "l", "name": "ls", "args": {"path": "/"}},
    ]
    host = _load_example("file_tools_host")
    workflow_id = uid("host")
    result = await host.main(
        temporal_server.address, root, steps, namespace=temporal_server.namespace,
        workflow_id=workflow_id,
    )  # fmt: skip
    answers = result["answers"]
    assert not any(a["error"] for a in answers.values()), answers
    assert (root / "a.txt").read_text() == "alpha\n"
    assert "remember" in answers["r"]["text"]
    assert {"/a.txt", "/notes.md"} <= set(answers["l"]["text"].splitlines())
    assert "write_file" in result["offered"]
    client = await plugin_client(temporal_server, FilegatePlugin(settings=QUIET))
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    replayer = Replayer(workflows=[host.ToolListWorkflow], plugins=[FilegatePlugin(settings=QUIET)])
    await replayer.replay_workflow(history)


@pytest.mark.services
async def test_an_own_workflow_hosts_a_local_backend_through_the_plugin(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """ToolListWorkflow with a ``kind="local"`` backend: its tools run as local
    activities on the workflow's own worker, which the plugin gave them to."""
    from filegate.workflows import FileToolsConfig

    host = _load_example("file_tools_host")
    root = tmp_path / "ws"
    root.mkdir()
    plugin = FilegatePlugin(
        backends={"ws": FilesystemBackend(root)}, journal_dir=tmp_path / "j", settings=QUIET
    )
    client = await plugin_client(temporal_server, plugin)
    steps = [
        {"id": "w", "name": "write_file", "args": {"file_path": "/b.txt", "content": "beta\n"}},
        {"id": "r", "name": "read_file", "args": {"file_path": "/b.txt"}},
    ]
    queue = uid("host")
    async with Worker(client, task_queue=queue, workflows=[host.ToolListWorkflow]):
        result = await client.execute_workflow(
            host.ToolListWorkflow.run,
            args=[FileToolsConfig(backend=BackendSpec(default=LOCAL)), steps],
            id=uid("local-host"),
            task_queue=queue,
            execution_timeout=timedelta(minutes=1),
        )
    assert not result["answers"]["w"]["error"] and "beta" in result["answers"]["r"]["text"]
    assert (root / "b.txt").read_text() == "beta\n"


@pytest.mark.services
async def test_large_payloads_travel_as_s3_references(
    temporal_server: TemporalDevServer, s3_server: S3DevServer, minio_client: Minio, tmp_path: Path
) -> None:
    """(c) The store comes from typed settings (``FILEGATE_S3_*``): payloads over the
    codec threshold leave history as references to objects in its bucket."""
    settings = Settings.model_validate({"s3": {
        "endpoint": s3_server.endpoint, "access_key": s3_server.access_key,
        "secret_key": s3_server.secret_key, "bucket": uid("plugin"),
    }})  # fmt: skip
    root = tmp_path / "ws"
    root.mkdir()
    plugin = FilegatePlugin(
        agent=True,
        backends={"ws": FilesystemBackend(root)},
        journal_dir=tmp_path / "j",
        settings=settings,
    )
    client = await plugin_client(temporal_server, plugin)
    codec = client.data_converter.payload_codec
    assert isinstance(codec, ArtifactPayloadCodec)
    assert codec.store is plugin.store() and codec.store.bucket == f"{settings.s3.bucket}-artifacts"
    big = "".join(f"line {i:05d} of a large file\n" for i in range(2000))  # ~50 KB
    model = scripted(
        calls(("w", "write_file", {"file_path": "/big.txt", "content": big})),
        {"content": "stored"},
    )
    queue, workflow_id = uid("agent"), uid("wf")
    async with Worker(client, task_queue=queue):
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="store it", model=model, backend=BackendSpec(default=LOCAL)),
            id=workflow_id,
            task_queue=queue,
            execution_timeout=timedelta(minutes=1),
        )
    assert result.final_answer == "stored"
    assert (root / "big.txt").read_text() == big
    events = [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]
    raw = b"".join(e.SerializeToString() for e in events)
    assert CODEC_ENCODING in raw and big.encode() not in raw
    assert max(e.ByteSize() for e in events) < len(big)
    store = codec.store
    prefix = store.thread_prefix(CODEC_THREAD)
    stored = list(minio_client.list_objects(store.bucket, prefix=prefix, recursive=True))
    assert stored  # the references' objects, in the settings' bucket


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn
class EchoWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        loud: str = await workflow.execute_activity(
            shout, text, start_to_close_timeout=timedelta(seconds=10)
        )
        return loud


@pytest.mark.services
async def test_the_workers_own_workflows_and_activities_are_kept(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """The plugin adds to what a worker lists, it never replaces it."""
    plugin = FilegatePlugin(
        agent=True,
        backends={"ws": FilesystemBackend(tmp_path)},
        journal_dir=tmp_path.parent / f"{tmp_path.name}-journal",
        settings=QUIET,
    )
    client = await plugin_client(temporal_server, plugin)
    queue = uid("own")
    worker = Worker(client, task_queue=queue, workflows=[EchoWorkflow], activities=[shout])
    config = worker.config(active_config=True)
    # Backends also bring the one-operation workflow and the transfers (filegate call).
    assert config["workflows"] == [EchoWorkflow, AgentWorkflow, SessionWorkflow, OperationWorkflow]
    names = [activity._Definition.must_from_callable(a).name for a in config["activities"]]
    assert names[0] == "shout"
    served = {"filegate.model", "filegate.read_file", "filegate.preview", "filegate.transfer.read"}
    assert served <= set(names)
    async with worker:
        loud = await client.execute_workflow(
            EchoWorkflow.run, "hello", id=uid("echo"), task_queue=queue
        )
    assert loud == "HELLO"


@pytest.mark.services
@pytest.mark.parametrize("fsync", [False, True])
async def test_the_plugins_settings_decide_whether_the_journal_fsyncs(
    temporal_server: TemporalDevServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fsync: bool,
) -> None:
    """Issue 35 item 4. Old code: the journal read ``FILEGATE_JOURNAL_FSYNC`` itself,
    so settings with fsync on, given to the plugin, flushed nothing."""
    import os as os_module

    monkeypatch.delenv("FILEGATE_JOURNAL_FSYNC", raising=False)
    journal = tmp_path / "j"
    flushed: list[str] = []
    real_fsync = os_module.fsync

    def counting(fd: int) -> None:
        with contextlib.suppress(OSError):
            target = os_module.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(journal)):
                flushed.append(target)
        real_fsync(fd)

    monkeypatch.setattr(os_module, "fsync", counting)
    root = tmp_path / "ws"
    root.mkdir()
    plugin = FilegatePlugin(
        agent=True,
        backends={"ws": FilesystemBackend(root)},
        journal_dir=journal,
        settings=Settings(journal=JournalSettings(fsync=fsync)),
    )
    client = await plugin_client(temporal_server, plugin)
    queue = uid("fsync")
    model = scripted(
        calls(("w", "write_file", {"file_path": "/a.txt", "content": "alpha\n"})),
        {"content": "done"},
    )
    async with Worker(client, task_queue=queue):
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="write",
                model=model,
                backend=BackendSpec(default=BackendRef(kind="local", name="ws")),
            ),
            id=uid("wf"),
            task_queue=queue,
            execution_timeout=timedelta(minutes=1),
        )
    assert result.final_answer == "done" and (root / "a.txt").read_text() == "alpha\n"
    assert bool(flushed) is fsync, flushed


LOCAL_WS = BackendSpec(default=BackendRef(kind="local", name="ws"))


def _tuning(config: Any) -> tuple[int, int, timedelta, timedelta]:
    """The poll counts, sticky timeout and heartbeat throttle a worker runs with."""
    polls = [
        config.get(f"max_concurrent_{kind}_task_polls")
        or config[f"{kind}_task_poller_behavior"].maximum
        for kind in ("workflow", "activity")
    ]
    return (
        polls[0],
        polls[1],
        config["sticky_queue_schedule_to_start_timeout"],
        config["max_heartbeat_throttle_interval"],
    )


@pytest.mark.services
async def test_the_factories_build_through_the_plugins_roles(
    temporal_client: Client, tmp_path: Path
) -> None:
    """Issue 35 item 3: ``agent_worker`` and ``tools_worker`` are ``Worker(plugins=[
    <roles>])`` (:func:`agent_role`, :func:`tools_role`), each role with its
    workflows and its tuning (an agent worker's local backends bring no tools
    tuning); a worker's own options and runner are kept as given."""
    from filegate.worker import agent_worker, tools_worker

    def root(name: str) -> dict[str, Any]:
        (tmp_path / name).mkdir()
        return {"ws": FilesystemBackend(tmp_path / name)}

    def journal(name: str) -> Path:
        return tmp_path.parent / f"{tmp_path.name}-{name}"

    runner = SandboxedWorkflowRunner()
    workers = {
        "agent": agent_worker(
            temporal_client, uid("a"), backends=root("agent"), journal_dir=journal("agent")
        ),
        "tools": tools_worker(
            temporal_client, uid("t"), root("tools"), journal("tools"),
            max_concurrent_activity_task_polls=3,
        ),
        "co": tools_worker(
            temporal_client, uid("c"), root("co"), journal("co"), serve_agents=True,
            workflow_runner=runner,
        ),
    }  # fmt: skip
    configs = {role: w.config(active_config=True) for role, w in workers.items()}
    roles = {
        name: [p.role for p in config["plugins"] if isinstance(p, WorkerRole)]
        for name, config in configs.items()
    }
    assert roles == {"agent": ["agent", "tools"], "tools": ["tools"], "co": ["agent", "tools"]}
    hosted = {role: set(c["workflows"]) for role, c in configs.items()}
    assert hosted["tools"] == {OperationWorkflow}
    assert hosted["agent"] == hosted["co"] == {AgentWorkflow, SessionWorkflow, OperationWorkflow}
    second = timedelta(seconds=1)
    assert _tuning(configs["agent"]) == (20, 5, 2 * second, 60 * second)
    assert _tuning(configs["tools"]) == (5, 3, 10 * second, second)
    assert _tuning(configs["co"]) == (20, 50, 2 * second, second)
    assert configs["co"]["workflow_runner"] is runner
    assert isinstance(configs["agent"]["workflow_runner"], ContextFreeSandboxRunner)


def _activity_names(config: Any) -> set[str]:
    return {activity._Definition.must_from_callable(a).name or "" for a in config["activities"]}


@pytest.mark.services
async def test_roles_stay_on_the_worker_they_are_given_to(
    temporal_server: TemporalDevServer, minio_client: Minio, tmp_path: Path
) -> None:
    """Issue 35 item 3: the client carries what every process shares (``FilegatePlugin()``:
    the converter); a role given to one ``Worker`` serves there and nowhere else.
    With ``FilegatePlugin(agent=True)`` on the client, every worker of that client
    became an agent worker. The tools role offloads to the store behind the
    client's codec, and a run goes through both workers; the replayer takes the
    agent role alone."""
    shared = tmp_path / "shared"
    shared.mkdir()
    client = await plugin_client(temporal_server, FilegatePlugin(settings=QUIET))
    store = ArtifactStore(minio_client, "roles-test", namespace=uid("ns"))
    agent_q, tools_q = uid("agent"), uid("tools")
    tools = tools_role({"shared": FilesystemBackend(shared)}, tmp_path / "j")
    agent_worker = Worker(client, task_queue=agent_q, plugins=[agent_role()])
    tools_worker = Worker(client, task_queue=tools_q, plugins=[tools])
    bare = Worker(client, task_queue=uid("bare"), workflows=[EchoWorkflow])
    agent_config = agent_worker.config(active_config=True)
    tools_config = tools_worker.config(active_config=True)
    assert set(agent_config["workflows"]) == {AgentWorkflow, SessionWorkflow}
    assert _activity_names(agent_config) == {"filegate.model"}
    assert set(tools_config["workflows"]) == {OperationWorkflow}
    assert "filegate.model" not in _activity_names(tools_config)
    assert {"filegate.write_file", "filegate.preview"} <= _activity_names(tools_config)
    assert bare.config(active_config=True)["workflows"] == [EchoWorkflow]
    assert _tuning(agent_config)[:2] == (20, 5) and _tuning(tools_config)[:2] == (5, 50)
    assert tools.store(tools_config) is None  # the client has no codec: inline
    coded = with_payload_codec(client, store)
    assert tools.store(cast(Any, {"client": coded})) is store

    model = scripted(
        calls(("w", "write_file", {"file_path": "/a.txt", "content": "alpha\n"})),
        {"content": "done"},
    )
    remote = BackendRef(kind="remote", name="shared", task_queue=tools_q)
    workflow_id = uid("wf")
    async with agent_worker, tools_worker:
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="write", model=model, backend=BackendSpec(default=remote)),
            id=workflow_id,
            task_queue=agent_q,
            execution_timeout=timedelta(minutes=1),
        )
    assert result.final_answer == "done"
    assert (shared / "a.txt").read_text() == "alpha\n"
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    replayer = Replayer(workflows=[], plugins=[agent_role()])
    await replayer.replay_workflow(history)


def test_payload_converters_built_per_activation_share_one_state() -> None:
    """The SDK builds a payload converter per workflow activation; Filegate's share the
    first one's serializer, converters and TypeAdapter cache (issue 55), and convert as
    the pydantic converter does."""
    from filegate.activities.history import SharedPayloadConverter
    from filegate.kernel.tool_types import ToolOutcome

    first, second = SharedPayloadConverter(), SharedPayloadConverter()
    assert first.converters is second.converters
    value = ToolOutcome(content="x", fingerprint="f")
    payloads = second.to_payloads([value])
    assert payloads == PydanticPayloadConverter().to_payloads([value])
    assert first.from_payloads(payloads, [ToolOutcome]) == [value]
