"""``filegate run`` joins only a Temporal this user started.

Why: a server found on the dev port may be another user's. Joining it put
this user's runs and approval cards in that user's UI and that user's
abandoned runs in this user's ``approvals``, and said only that it "reused" a
stack (issue 36). The owner comes from the kernel's socket table; another
uid's server is refused unless ``TEMPORAL_ADDRESS`` names it on purpose.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from filegate.cli.errors import CliError
from filegate.cli.services import DEV_PORT_ENV, _unmanaged
from filegate.devstack.servers import free_port, listener_uid
from tests.readable_copy import python_for

NOBODY = 65534


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_the_owner_of_a_listener_is_read_from_the_socket_table(listening: int) -> None:
    assert listener_uid(listening) == os.getuid()
    assert listener_uid(free_port()) is None


def test_an_ipv6_listener_is_found_too() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    with socket.socket(socket.AF_INET6) as sock:
        try:
            sock.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback on this machine")
        sock.listen()
        assert listener_uid(sock.getsockname()[1]) == os.getuid()


def test_a_server_of_this_user_outside_the_stack_is_named(listening: int, tmp_path: Path) -> None:
    how = _unmanaged(listening, tmp_path / "state")
    assert "this user's" in how and str(tmp_path / "state") in how


@pytest.fixture
def foreign(tmp_path: Path) -> Iterator[int]:
    """A listener on the dev port owned by uid 65534 (needs root to drop to it)."""
    if os.getuid() != 0:
        pytest.skip("needs root: only root can own a socket as another uid")
    python = python_for(NOBODY)
    if python is None:
        pytest.skip("no interpreter uid 65534 may run")
    port = free_port()
    code = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
        "print('up', flush=True); time.sleep(120)\n"
    )
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    proc = subprocess.Popen(
        [*drop, python, "-I", "-c", code, str(port)], stdout=subprocess.PIPE, cwd="/"
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
        yield port
    finally:
        proc.kill()
        proc.wait()


def test_another_users_server_is_refused(foreign: int, tmp_path: Path) -> None:
    assert listener_uid(foreign) == NOBODY
    with pytest.raises(CliError, match=f"uid {NOBODY}'s Temporal") as refused:
        _unmanaged(foreign, tmp_path / "state")
    assert refused.value.code == 2 and "TEMPORAL_ADDRESS" in str(refused.value)


@pytest.mark.services
def test_filegate_run_refuses_another_users_server(foreign: int, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    script = tmp_path / "script.json"
    script.write_text('{"turns": [{"content": "done"}]}')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env.update(FILEGATE_STATE_DIR=str(tmp_path / "state"), **{DEV_PORT_ENV: str(foreign)})
    done = subprocess.run(
        [sys.executable, "-m", "filegate", "run", "hi", "--model", f"scripted:{script}",
         "--root", str(root)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert f"uid {NOBODY}'s Temporal" in line and "TEMPORAL_ADDRESS" in line, done.stderr
