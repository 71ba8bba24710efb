"""The command line's tracing settings, as an operator meets them (issue 54).

A malformed OTLP endpoint used to be accepted silently (every span dropped), and a
collector that hangs added seconds to every command (its end waited 5 s for the
last spans, the exporter 10 s per try). Real parts: the CLI as a subprocess on the
suite's Temporal server, a TCP collector that accepts and never answers.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli import cli, cli_env

__all__ = ["cli_env"]

pytestmark = pytest.mark.services


@pytest.mark.parametrize(
    "endpoint",
    ["localhost:4318", "http://127.0.0.1:notaport", "ftp://127.0.0.1:4318", "http://:4318"],
)
def test_a_malformed_endpoint_is_one_line(cli_env: dict[str, str], endpoint: str) -> None:
    env = {**cli_env, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    done = cli(env, "approvals")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("filegate: OTEL_EXPORTER_OTLP_ENDPOINT=") and done.stdout == ""


@pytest.fixture
def hanging_collector() -> Iterator[str]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_hanging_collector_costs_a_command_at_most_a_second(
    cli_env: dict[str, str], hanging_collector: str, tmp_path: Path
) -> None:
    """The same ``filegate call`` with and without a collector that never answers: its
    spans are dropped after a bounded wait, at most about a second more (best of three
    each; the old code waited 5 s at every command's end)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    call = ["call", "read_file", "--args", '{"file_path": "/a.txt"}', "--root", str(root)]

    def best(env: dict[str, str]) -> float:
        times = []
        for _ in range(3):
            began = time.monotonic()
            done = cli(env, *call)
            assert done.returncode == 0, done.stderr
            times.append(time.monotonic() - began)
        return min(times)

    plain = best(cli_env)
    traced = best({**cli_env, "OTEL_EXPORTER_OTLP_ENDPOINT": hanging_collector})
    assert traced - plain < 2.0, (plain, traced)
