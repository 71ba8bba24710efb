"""Fixtures of the CLI and approval UI tests: a reviewer's UI on the session server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from filegate.cli.ui.app import create_app
from filegate.cli.ui.web_guard import CSRF_HEADER
from filegate.devstack.servers import TemporalDevServer
from tests.ui_support import TOKEN, WEB_UI, client_factory, served, ui_access


@pytest.fixture
def ui(temporal_server: TemporalDevServer) -> Iterator[TestClient]:
    """A reviewer's session: logged in through the token URL, sending the page's CSRF token."""
    access = ui_access()
    app = create_app(client_factory(temporal_server), access)
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        login = client.get("/", params={"token": TOKEN})  # 303 + cookie, then the page
        assert login.status_code == 200 and f'content="{access.csrf_token}"' in login.text
        client.headers[CSRF_HEADER] = access.csrf_token
        yield client


@pytest.fixture
def ui_url(temporal_server: TemporalDevServer) -> Iterator[str]:
    """The UI (behind its guard) served by uvicorn on its own thread and event loop."""
    app = create_app(client_factory(temporal_server), ui_access(), temporal_web_url=WEB_UI)
    with served(app) as url:
        yield url
