"""Fixtures of the workflow tests."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment


@pytest_asyncio.fixture(scope="module")
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server shipped in the venv (no download)."""
    binary = Path(sys.executable).parent / "temporal-test-server"
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=str(binary)
    )
    try:
        yield env
    finally:
        await env.shutdown()
