"""Filegate installs as one package, ``filegate``, and lives next to a standard Temporal project.

Temporal's samples teach users to write ``workflows.py``, ``activities.py`` and
``worker.py``; an installed Filegate must never claim those names. These tests
build the real wheel (pip, as a user would), look inside it, then install it
alone into a directory and run a scripted ``AgentWorkflow`` from a user project
that has all three files of its own, on the embedded servers.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer

ROOT = Path(__file__).resolve().parents[2]


NOT_SHIPPED = ("tests/", "bench/", "docs/", "deploy/", "build/", ".ci/")
NOT_COPIED = (".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")


def shipped_files() -> list[str]:
    """Every committed module and template of the package, as a wheel path.

    Why derived from git: the package list in pyproject.toml is explicit, so a new
    subpackage that is not added to it is silently left out of the wheel (the
    Pydantic AI adapter was, until this test)."""
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.html", "*.js", "py.typed"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    return [f"filegate/{name}" for name in listed if not name.startswith(NOT_SHIPPED)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The package's wheel, built from a private copy of the checkout.

    Why a copy: setuptools builds in the source tree (``build/``, the egg-info),
    and two xdist workers each building this module's wheel from the checkout at
    once failed one build (seen under four workers)."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_COPIED))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (made,) = out.glob("filegate-*.whl")
    yield made


@pytest.mark.slow
def test_wheel_holds_only_the_filegate_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    dist_info = {top for top in tops if top.endswith(".dist-info")}
    assert tops - dist_info == {"filegate"}, sorted(tops)
    for required in shipped_files():
        assert required in names, f"{required} is not in the wheel (pyproject's packages?)"
    assert not [n for n in names if n.startswith(("filegate/tests/", "filegate/bench/"))]
    (entry_points,) = [n for n in names if n.endswith("entry_points.txt")]
    assert "filegate = filegate." in zipfile.ZipFile(wheel).read(entry_points).decode()


FACADES = (
    "filegate",
    "filegate.kernel",
    "filegate.backends",
    "filegate.backends.filesystem",
    "filegate.activities",
    "filegate.activities.providers",
    "filegate.workflows",
)


@pytest.mark.parametrize("package", FACADES)
def test_every_name_a_facade_exports_resolves(package: str) -> None:
    """The package roots export lazily: a moved module must not leave a dead name."""
    module = importlib.import_module(package)
    for name in getattr(module, "__all__", []):
        assert getattr(module, name) is not None, f"{package}.{name}"


USER_WORKFLOWS = '''
"""The user's own workflows module, named as Temporal's samples name it."""
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import importlib

    # The user's own activities.py, found the way `import activities` finds it.
    shout = importlib.import_module("activities").shout


@workflow.defn
class GreetingWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(
            shout, name, start_to_close_timeout=timedelta(seconds=10)
        )
'''

USER_ACTIVITIES = '''
"""The user's own activities module."""
from temporalio import activity


@activity.defn
async def shout(name: str) -> str:
    return f"HELLO {name.upper()}"
'''

USER_WORKER = '''
"""The user's own worker.py: their workflow and Filegate's agent, side by side."""
import asyncio
import json
import os
import sys
import uuid

import importlib

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

import filegate
from filegate import (
    AgentInput, AgentWorkflow, BackendRef, BackendSpec, FilesystemBackend, ModelSpec,
    agent_worker, tools_worker,
)


# The user's own modules, found the way `import workflows` / `import activities`
# find them: from the script's directory, ahead of anything installed.
workflows = importlib.import_module("workflows")
activities = importlib.import_module("activities")


async def main() -> None:
    client = await Client.connect(
        os.environ["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter
    )
    root = sys.argv[1]
    script = {"turns": [
        {"tool_calls": [{"id": "c1", "name": "write_file",
                         "args": {"file_path": "/hello.txt", "content": "from a user project"}}]},
        {"content": "wrote it"},
    ]}
    run = uuid.uuid4().hex[:8]
    own = Worker(client, task_queue=f"user-{run}", workflows=[workflows.GreetingWorkflow],
                 activities=[activities.shout])
    agent = agent_worker(client, f"agent-{run}")
    tools = tools_worker(client, f"tools-{run}", {"ws": FilesystemBackend(root)},
                         os.path.join(root, "..", "journal"))
    async with own, agent, tools:
        greeting = await client.execute_workflow(
            workflows.GreetingWorkflow.run, "temporal", id=f"greet-{run}",
            task_queue=f"user-{run}")
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="write hello",
                model=ModelSpec(provider="scripted", options={"script": script}),
                backend=BackendSpec(default=BackendRef(
                    kind="remote", name="ws", task_queue=f"tools-{run}")),
            ),
            id=f"agent-{run}", task_queue=f"agent-{run}",
        )
    print(json.dumps({
        "filegate": filegate.__file__,
        "workflows": workflows.__file__,
        "greeting": greeting,
        "answer": result.final_answer,
        "stop": result.stop_reason,
    }))


asyncio.run(main())
'''


@pytest.mark.slow
@pytest.mark.services
def test_a_user_project_with_its_own_workflows_module_runs_the_agent(
    wheel: Path, temporal_server: TemporalDevServer, s3_server: S3DevServer, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # Only filegate arrived: nothing at the names a Temporal project uses.
    assert not {"workflows", "activities", "backends", "worker.py"} & {
        p.name for p in site.iterdir()
    }
    project = tmp_path / "userproj"
    project.mkdir()
    for name, text in (
        ("workflows.py", USER_WORKFLOWS),
        ("activities.py", USER_ACTIVITIES),
        ("worker.py", USER_WORKER),
    ):
        (project / name).write_text(textwrap.dedent(text))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env |= {"TEMPORAL_ADDRESS": temporal_server.address, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "worker.py", str(workspace)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(report["filegate"]).is_relative_to(site), "the installed wheel must be used"
    assert Path(report["workflows"]) == project / "workflows.py"
    assert report["greeting"] == "HELLO TEMPORAL"
    assert (report["stop"], report["answer"]) == ("final_answer", "wrote it")
    assert (workspace / "hello.txt").read_text() == "from a user project"
