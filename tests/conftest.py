"""Session fixtures for the real services: Temporal dev server and S3 (weed mini).

Lazy by design: a server starts only when a test asks for it, once per
session, and is stopped at session end. A group's conftest.py (tests/cli/,
tests/workflows/, ...) holds the fixtures its modules share, and a test file
its own; this file stays about the shared services.
"""

from __future__ import annotations

import ast
import fcntl
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import pytest_asyncio
from hypothesis import settings
from minio import Minio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer

pytest_plugins = ["tests.sandbox_fixtures"]
"""The bwrap modules' fixtures (``sb`` on ``root``); a module's own ``root`` wins."""

# CI replays the same generated examples on every run, so a landing never
# depends on the luck of a seed; local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A shell without job control starts a background job (``pytest &``, nohup in
    # a script) with SIGINT ignored, and children inherit that: the tests that
    # press Ctrl-C on a CLI (it exits 130) would see it ignored. A handled signal
    # is reset to its default in each child.
    signal.signal(signal.SIGINT, signal.default_int_handler)

if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("FILEGATE_DEV_TEMPORAL_PORT"):
    # Workers run side by side: a ``filegate run`` that is given no Temporal would
    # start or reuse one on 127.0.0.1:7233, shared by every worker. One port each.
    from filegate.devstack.servers import free_port

    os.environ["FILEGATE_DEV_TEMPORAL_PORT"] = str(free_port())


SERVER_FIXTURES = frozenset(
    {"temporal_server", "temporal_client", "s3_server", "minio_client", "cli_env"}
)
"""Fixtures that start a real server: a test using one is a ``services`` test."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses a server fixture is marked ``services`` whether or not its
    module says so, so ``-m "not services and not slow"`` selects the quick tests
    that start no shared server (1 767 of them, under a minute on the 2-core
    machine; a test that takes half a second or more, such as a property sweep
    or one that starts sandboxes or a CLI process, is marked ``slow``).

    Under pytest-xdist, the tests marked ``slow`` are handed out first, longest
    first, each followed by a plain test, and the ones marked ``timing`` last.

    Why: ``--dist load`` hands tests out in collection order, so a long test
    collected last (the fresh-machine install, mypy) would run alone at the
    end while the other workers idle; started first, it overlaps the rest. A
    timing test runs alone (:func:`_timed_alone`): at the end it waits for no
    long test, and the short ones it holds up are few."""
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)
    if _xdist_worker(config):
        items[:] = _dispatch_order(items)


def _dispatch_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """Slow tests by :func:`_dispatch_rank`, each followed by a plain one while
    plain ones last, then the remaining plain tests, then the timing tests.

    Why the pairs: with ``--maxschedchunk 1`` (pyproject) xdist hands each worker
    two tests at first and then one as it finishes one; a worker runs its tests
    in order, so two long tests handed together would run one after the other
    while another worker ran short ones."""
    groups: tuple[list[pytest.Item], ...] = ([], [], [])
    for item in sorted(items, key=_dispatch_rank):
        groups[_dispatch_rank(item)[0]].append(item)
    slow, plain, timed = groups
    paired = [item for pair in zip(slow, plain, strict=False) for item in pair]
    rest = slow[len(plain) :] + plain[len(slow) :]
    return paired + rest + timed


def _xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker.

    Why not ``-n``: the controller collects nothing, it hands out the workers'
    collection order, and a worker's ``numprocesses`` is reset to None, so a
    sort keyed on it never ran (seen in a traced run: the fresh-machine install
    started at 300 s, after the tests collected before it)."""
    return hasattr(config, "workerinput")


def _dispatch_rank(item: pytest.Item) -> tuple[int, float]:
    """Slow tests first, the longest (``slow(seconds=...)``) before the rest; timing
    tests last.

    Why the seconds: a timing test waits for every running test to end, and
    the workers wait with it; the fresh-machine install (over two minutes)
    handed out mid-run held three workers idle behind one timing test."""
    if item.get_closest_marker("timing") is not None:
        return (2, 0.0)
    slow = item.get_closest_marker("slow")
    if slow is None:
        return (1, 0.0)
    return (0, -float(slow.kwargs.get("seconds", 0)))


_NOT_MARKS = re.compile(r"\s*not\s+(\w+)\s*(?:and\s+not\s+(\w+)\s*)*$")


def _ruled_out(markexpr: str) -> frozenset[str]:
    """The marks a ``-m`` of the form ``not a and not b ...`` rules out; else none
    (another form could select a marked test, so nothing is skipped for it)."""
    if not _NOT_MARKS.fullmatch(markexpr):
        return frozenset()
    return frozenset(re.findall(r"not\s+(\w+)", markexpr))


def _module_marks(path: Path) -> frozenset[str]:
    """The ``pytest.mark.<name>`` names in a module's top-level ``pytestmark``."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError):
        return frozenset()
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return frozenset(
                sub.attr
                for sub in ast.walk(node.value)
                if isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Attribute)
                and sub.value.attr == "mark"
            )
    return frozenset()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``-m "not services and not slow"``, a module whose every test carries one
    of those marks (its ``pytestmark``) is not even imported.

    Why: selecting by mark still imports every module, and the agent frameworks
    some of them load (OpenAI Agents, LangChain's test suite, MCP, Pydantic AI)
    made collection half of the server-free subset's time. Read from the
    module's syntax tree, so nothing is imported to decide."""
    if not collection_path.name.startswith("test_") or collection_path.suffix != ".py":
        return None
    ruled_out = _ruled_out(config.getoption("markexpr", "") or "")
    if ruled_out and _module_marks(collection_path) & ruled_out:
        return True
    return None


@contextmanager
def _machine(shared: Path, *, alone: bool) -> Iterator[None]:
    """A readers-writer lock over the machine, across the xdist workers.

    Every test holds ``share`` shared; a ``timing`` test holds it exclusively.
    ``gate`` keeps new tests from starting while a timing test waits, so a
    stream of short tests cannot starve it."""
    gate = os.open(shared / "machine.gate", os.O_RDWR | os.O_CREAT, 0o600)
    share = os.open(shared / "machine.share", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(share, fcntl.LOCK_EX)
        else:
            fcntl.flock(share, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(share)  # closing releases its locks
        os.close(gate)


@pytest.fixture(autouse=True)
def _timed_alone(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under pytest-xdist, a test marked ``timing`` runs while no other test does.

    Why: it asserts a wall-clock budget (a recovery within 4 s, a search stopped
    on time), which measures the product only on a machine not saturated by
    the other workers' tests; everything else runs side by side."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent  # common to the workers of a run
    with _machine(shared, alone=request.node.get_closest_marker("timing") is not None):
        yield


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    """A real ``temporal server start-dev`` (SQLite in a tmp dir, loopback, free port)."""
    with TemporalDevServer(tmp_path_factory.mktemp("temporal")) as server:
        yield server


@pytest_asyncio.fixture(scope="session")
async def temporal_client(temporal_server: TemporalDevServer) -> AsyncIterator[Client]:
    """A client on the session server using the pydantic data converter, as the worker does."""
    client = await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        data_converter=pydantic_data_converter,
    )
    yield client


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3DevServer]:
    """A real SeaweedFS S3 gateway with a generated identity (signatures checked)."""
    with S3DevServer(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="session")
def minio_client(s3_server: S3DevServer) -> Minio:
    """A minio client holding the session S3 server's credentials."""
    return Minio(
        s3_server.endpoint,
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        secure=False,
    )
