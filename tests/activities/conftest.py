"""Fixtures of the activity tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from filegate.devstack.s3 import S3DevServer


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3DevServer]:
    """An S3 server of the requesting module alone (never the session one other tests
    share): the S3 outage tests stop and relaunch it on the same ports and data."""
    with S3DevServer(tmp_path_factory.mktemp("s3-private")) as server:
        yield server
