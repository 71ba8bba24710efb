"""A tiny real HTTP server on 127.0.0.1 that plays canned model-API responses.

Each test queues the responses it wants (status, headers, JSON body) and then
inspects exactly what the SDK sent: method, path, headers and JSON body.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Canned:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    before: Callable[[], None] | None = None
    """Run as the request arrives, before the answer: something that happens "meanwhile"."""


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    json: Any
    at: float = field(default_factory=time.monotonic)


class FakeModelServer:
    """Threaded server; responses are served in queue order, requests are recorded."""

    def __init__(self) -> None:
        self.responses: deque[Canned] = deque()
        self.requests: list[Received] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                server.requests.append(
                    Received(
                        method="POST",
                        path=self.path,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        json=json.loads(raw) if raw else None,
                    )
                )
                canned = (
                    server.responses.popleft()
                    if server.responses
                    else Canned(500, {"error": {"message": "fake server: no response queued"}})
                )
                if canned.before is not None:
                    canned.before()
                payload = json.dumps(canned.body).encode()
                self.send_response(canned.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for k, v in canned.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def queue(self, status: int = 200, body: Any = None, **headers: str) -> None:
        """Queue a response; header names use ``_`` for ``-`` (retry_after=...)."""
        self.responses.append(
            Canned(status, body, {k.replace("_", "-"): v for k, v in headers.items()})
        )

    def queue_after(self, before: Callable[[], None] | None, body: Any) -> None:
        """Queue a 200 response whose request first runs ``before`` (a change "meanwhile")."""
        self.responses.append(Canned(200, body, before=before))

    @property
    def last(self) -> Received:
        return self.requests[-1]

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
