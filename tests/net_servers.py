"""A web server on the host's loopback for the network tests: stands in for an API.

Every GET gets ``token`` as its body, except ``/redirect...``, which answers
302 to ``http://elsewhere.test:80/x`` (a redirect to a host no rule names).
The paths asked for are recorded, so a test can say what reached the server.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

REDIRECT_TO = "http://elsewhere.test:80/x"


@contextmanager
def token_server(token: str) -> Iterator[tuple[int, list[str]]]:
    """The server's port and the list of paths it was asked for, while it runs."""
    body = token.encode()
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            if self.path.startswith("/redirect"):
                self.send_response(302)
                self.send_header("Location", REDIRECT_TO)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
