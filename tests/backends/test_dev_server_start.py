"""The embedded Temporal's start-up failures: one line, and a start where it used to fail.

Issue 28 item 11. When the dev server could not start, ``demo`` and ``run``
printed the Go error chain, about twenty screen lines; now they print one line
with the cause and the path of the full log. And a uid without a passwd entry
and without ``$USER`` (a container run as ``--user 12345``) could not start it
at all: Go's ``user.Current()`` needs ``USER`` and ``HOME`` then, which the
server's environment now always has.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from filegate.cli.errors import SERVICE_FAILED, service_failure
from filegate.devstack.failures import startup_cause
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import PortClash, StartupFailed, TemporalDevServer, go_user_env
from tests.readable_copy import python_for, readable_copy

CLI = [sys.executable, "-m", "filegate"]
NO_PASSWD_UID = 12345
"""A uid with no /etc/passwd entry on the machines we test on (checked below)."""

_SRC = "/home/runner/go/pkg/mod/go.temporal.io/server@v1.32.0"
FX_CHAIN = (
    'Error: failed starting server: could not build arguments for function "go.temporal.io/'
    f'server/temporal".ServerLifetimeHooks ({_SRC}/temporal/fx.go:943): failed to build '
    '*temporal.ServerImpl: could not build value group *temporal.ServicesMetadata[group="services"]'
    ': received non-nil error from function "go.temporal.io/server/temporal".HistoryServiceProvider'
    f" ({_SRC}/temporal/fx.go:537): failed to build *resource.Resource: received non-nil error "
    'from function "reflect".makeFuncStub (/opt/go/src/reflect/asm_amd64.s:28): error detecting '
    "resource: user: Current requires cgo or $USER set in environment"
)
"""The last line of a real failed start (shortened: the chain had twelve links)."""
FX_FIELD = (
    'time=2026-12-01T23:07:49.965 level=ERROR msg="invoke failed" component=fx error="could not '
    'build arguments for function \\"go.temporal.io/server/service/frontend\\".NewServiceProvider'
    f"\\n\\t{_SRC}/service/frontend/fx.go:151:\\nfailed to build *frontend.HTTPAPIServer:\\n"
    'received non-nil error from function \\"go.temporal.io/server/service/frontend\\".HTTP'
    f"APIServerProvider\\n\\t{_SRC}/service/frontend/fx.go:1046:\\nfailed listening for HTTP API "
    'on 127.0.0.1:7243: listen tcp 127.0.0.1:7243: bind: address already in use" stack="..."'
)
"""An fx ``level=ERROR`` line, multi-line chain escaped into its ``error`` field."""
PORT_TAKEN = "can't set frontend port 7233: listen tcp 127.0.0.1:7233: bind: address already in use"


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        (
            FX_CHAIN,
            "error detecting resource: user: Current requires cgo or $USER set in environment",
        ),
        (
            FX_FIELD,
            "failed listening for HTTP API on 127.0.0.1:7243: listen tcp 127.0.0.1:7243: bind: "
            "address already in use",
        ),
        (
            f"Error: {PORT_TAKEN}",
            PORT_TAKEN,
        ),
        (
            "Error: failed starting server: failed creating namespaces: unable to create SQLite "
            "admin DB: unable to open database file (14)",
            "failed creating namespaces: unable to create SQLite admin DB: unable to open database "
            "file (14)",
        ),
        (
            "F1201 23:10:47.422129 master.go:12 open /data/x: permission denied",
            "open /data/x: permission denied",
        ),
        ("Temporal Server: localhost:7233\nall fine", None),
    ],
)
def test_the_cause_of_a_failed_start_is_one_line(log: str, cause: str | None) -> None:
    assert startup_cause(f"noise before\n{log}\n") == cause


def test_a_port_clash_is_one_line_naming_the_log(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        server = TemporalDevServer(tmp_path, port=sock.getsockname()[1])
        with pytest.raises(PortClash) as err:
            server.start(timeout=30)
    text = str(err.value)
    assert "\n" not in text and text.startswith("temporal exited with code 1 during startup: ")
    assert "bind: address already in use" in text and "(full log: " in text
    assert text.endswith(f"(full log: {server.log_path})")
    assert "go.temporal.io" not in text  # no Go chain, no source paths
    assert "address already in use" in server.log_path.read_text()  # the log keeps it all


def test_a_log_in_a_scratch_dir_is_kept_where_the_line_points(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    log = scratch / "temporal.log"
    log.write_text(FX_CHAIN)
    failure = StartupFailed("temporal", "exited with code 1 during startup", "boom", log)
    message = str(service_failure(failure, scratch))
    kept = Path(message.rpartition("(full log: ")[2].rstrip(")"))
    try:
        assert message.startswith(f"{SERVICE_FAILED}: temporal exited with code 1")
        assert kept.parent == Path(tempfile.gettempdir()) and kept.read_text() == FX_CHAIN
    finally:
        kept.unlink(missing_ok=True)
    assert str(service_failure(failure)).endswith(f"(full log: {log})")  # not scratch: as is


@pytest.fixture
def broken_state_dir() -> Iterator[Path]:
    """A state dir whose Temporal database path is a directory: the server cannot open it."""
    state = Path(tempfile.mkdtemp(prefix="filegate-broken-"))
    (state / "temporal" / "temporal.db").mkdir(parents=True)
    yield state
    shutil.rmtree(state, ignore_errors=True)


@pytest.mark.parametrize("command", [["demo"], ["run", "hello"]])
def test_demo_and_run_say_why_the_dev_server_failed_in_one_line(
    command: list[str], broken_state_dir: Path, s3_server: S3DevServer, tmp_path: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env.update(
        FILEGATE_STATE_DIR=str(broken_state_dir),
        FILEGATE_DEV_TEMPORAL_PORT=str(port),  # run: not 7233, which may be in use here
        FILEGATE_S3_ENDPOINT=s3_server.endpoint,  # only Temporal is started
        FILEGATE_S3_ACCESS_KEY=s3_server.access_key,
        FILEGATE_S3_SECRET_KEY=s3_server.secret_key,
    )
    if command[0] == "run":
        (tmp_path / "ws").mkdir()
        script = tmp_path / "hi.json"
        script.write_text('{"turns": [{"content": "hi"}]}')
        command = [*command, "--root", str(tmp_path / "ws"), "--model", f"scripted:{script}"]
    proc = subprocess.run(
        [*CLI, *command], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    log = broken_state_dir / "temporal" / "temporal.log"
    assert proc.stderr == (
        f"filegate: {SERVICE_FAILED}: temporal exited with code 1 during startup: failed "
        "creating namespaces: unable to create SQLite admin DB: unable to open database file "
        f"(14) (full log: {log})\n"
    )
    assert "unable to open database file" in log.read_text()


def _no_passwd_entry(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
    except KeyError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_the_dev_server_starts_for_a_uid_without_passwd_entry_or_user() -> None:
    assert _no_passwd_entry(NO_PASSWD_UID), f"uid {NO_PASSWD_UID} has a passwd entry here"
    # Not under pytest's private (0700) tmp dir: the dropped uid must write there.
    state = Path(tempfile.mkdtemp(prefix="filegate-nopasswd-"))
    state.chmod(0o777)
    script = (
        "import sys\n"
        "from filegate.devstack.servers import TemporalDevServer\n"
        "server = TemporalDevServer(sys.argv[1]).start(timeout=60)\n"
        "print('started', server.address, flush=True)\n"
        "server.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "HOME", "LOGNAME")}
    python = python_for(NO_PASSWD_UID)
    if python is None:
        pytest.skip(f"no python 3.11+ that uid {NO_PASSWD_UID} may run")
    try:
        # A checkout under a 0700 home is out of the dropped uid's reach: it runs a copy.
        with readable_copy("temporal") as copy_env:
            proc = subprocess.run(
                ["setpriv", f"--reuid={NO_PASSWD_UID}", f"--regid={NO_PASSWD_UID}",
                 "--clear-groups", python, "-c", script, str(state / "temporal")],
                env={**env, **copy_env}, capture_output=True, text=True, timeout=120,
                check=False, cwd=state,
            )  # fmt: skip
    finally:
        shutil.rmtree(state, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("started 127.0.0.1:")


def test_the_server_always_gets_a_user_and_its_own_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent-home")
    env = go_user_env(tmp_path)
    assert env["HOME"] == str(tmp_path) and env["USER"]
    monkeypatch.setenv("USER", "ana")
    assert go_user_env(tmp_path)["USER"] == "ana"
