"""A LocalShell command cannot read the worker's credentials (:mod:`filegate.processes.guard`).

Real processes, no mocks: the "worker" is a child interpreter started with a
fake secret in its initial environment -- what ``/proc/<pid>/environ`` shows,
as for a tools worker given ``FILEGATE_S3_SECRET_KEY`` or ``OPENAI_API_KEY``.
It builds a :class:`LocalShellBackend` and runs probes that try to read that
secret back from ``/proc``: its environ (also per thread), its memory through
``maps`` + ``mem``, and the environ of every process up the parent chain to it.

Each run carries its own positive control: the same probes read a *decoy*
process of the same uid (started by the command itself) and must find the
decoy's secret. So a probe that finds nothing failed because the kernel said
no, not because the probe is broken; without the guard (a dumpable worker, a
root command holding ``CAP_SYS_PTRACE``) the worker's secret is printed.

As root the probe runs twice: as root, and as ``nobody`` (the bootstrap
imports everything it needs, then drops to uid/gid 65534; the uid change
itself makes a process non-dumpable, so it sets dumpable back to 1 to start
as a normally launched ``nobody`` worker would).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from filegate.backends.local_shell import MINIMAL_PATH, LocalShellBackend
from tests.roots import made

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc, prctl and capabilities are Linux only"
)

NOBODY = 65534
IS_ROOT = os.geteuid() == 0
SECRET_NAME = "FILEGATE_S3_SECRET_KEY"
API_KEY_NAME = "OPENAI_API_KEY"

MEM_PROBE = r"""
import sys
pid, needle = sys.argv[1], sys.argv[2][::-1].encode()
found = False
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
    for line in maps:
        span, perms = line.split()[:2]
        start, end = (int(x, 16) for x in span.split("-"))
        if not perms.startswith("r") or end - start > 1 << 28:
            continue
        try:
            mem.seek(start)
            chunk = mem.read(end - start)
        except (OSError, OverflowError, ValueError):
            continue
        if chunk and needle in chunk:
            found = True
            break
print("FOUND in memory" if found else "not in memory")
"""
"""Searches ``pid``'s memory for a needle given reversed, so no output or argv holds it."""

WORKER = r"""
import ctypes, json, os, shutil, sys, traceback
config = json.loads(sys.argv[1])
report = {"pid": os.getpid()}
try:
    from filegate.backends.local_shell import LocalShellBackend
    libc = ctypes.CDLL(None, use_errno=True)
    dumpable = lambda: libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    workspace = config["workspace"]
    python3 = shutil.which("python3", path=config["path"])
    if config["uid"] is not None:
        try:
            os.setgroups([])
            os.setgid(config["uid"])
            os.setuid(config["uid"])
        except OSError as exc:
            raise SystemExit(json.dumps({"skip": f"cannot switch to uid {config['uid']}: {exc}"}))
        libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: as a worker started as this user is
        if not os.access(sys.executable, os.X_OK):
            # The supervisor runs sys.executable -I -S (stdlib only): any interpreter will do.
            if python3 is None:
                raise SystemExit(json.dumps({"skip": (
                    f"uid {os.getuid()} cannot execute {sys.executable} and there is no "
                    f"python3 on {config['path']} to run the command supervisor")}))
            report["interpreter"] = sys.executable = python3
        if not os.access(workspace, os.X_OK):
            workspace = "/"  # the probes write nothing; they only need a cwd nobody can enter
    report["uid"], report["workspace"] = os.getuid(), workspace
    report["dumpable_before"] = dumpable()
    shell = LocalShellBackend(workspace)
    report["dumpable_after"] = dumpable()
    report["probes"] = {}
    for name, command in config["probes"].items():
        if name.startswith("mem") and python3 is None:
            continue
        result = shell.execute(command.replace("@WORKER@", str(os.getpid())))
        report["probes"][name] = result.model_dump()
except Exception:
    report["error"] = traceback.format_exc()
print(json.dumps(report))
"""


def _probes(secret: str, decoy: str) -> dict[str, str]:
    """Shell commands (``@WORKER@``: the worker's pid) that try to print the worker's secret."""
    chain = (  # up to the worker only: the processes above it hold the real environment
        'p=$$; while [ "$p" -gt 1 ]; do echo "pid $p"; tr "\\0" "\\n" < /proc/$p/environ; '
        '[ "$p" = @WORKER@ ] && break; p=$(sed -n "s/^PPid:[[:space:]]*//p" /proc/$p/status); done'
    )
    mem = f"python3 -I -S -c {_quote(MEM_PROBE)}"
    start_decoy = (
        f"env FILEGATE_DECOY={decoy} sleep 30 & d=$!; "
        "for i in $(seq 40); do "  # until sleep has exec'd with the decoy's environment
        'tr "\\0" "\\n" < /proc/$d/environ | grep -q "^FILEGATE_DECOY=" && break; '
        "sleep 0.05; done; "
    )
    return {
        "environ": "cat /proc/@WORKER@/environ",
        "threads": "cat /proc/@WORKER@/task/*/environ",
        "parent": 'tr "\\0" "\\n" < /proc/$PPID/environ',
        "chain": chain,
        "env": "env",
        "mem": f"{mem} @WORKER@ {secret[::-1]}",
        "control": start_decoy + 'tr "\\0" "\\n" < /proc/$d/environ; kill $d',
        "mem_control": start_decoy + f"{mem} $d {decoy[::-1]}; kill $d",
    }


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _child_env() -> dict[str, str]:
    """A bare environment (the secrets come on top); ``PYTHONPATH`` passes through, so the
    same tests can be pointed at another copy of the package (e.g. the code before the guard)."""
    env = {"PATH": MINIMAL_PATH, "PYTHONDONTWRITEBYTECODE": "1"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def _run_worker(
    workspace: Path, uid: int | None, env_secrets: dict[str, str], probes: dict[str, str]
) -> dict[str, Any]:
    config = {"workspace": str(workspace), "uid": uid, "probes": probes, "path": MINIMAL_PATH}
    done = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(config)],
        env={**_child_env(), **env_secrets},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0 and done.stderr.startswith('{"skip"'):
        pytest.skip(json.loads(done.stderr)["skip"])
    assert done.stdout.strip(), (
        f"the worker printed nothing (exit {done.returncode}):\n{done.stderr}"
    )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in report, f"the worker (uid {uid}) failed:\n{report['error']}"
    return report


WORKER_USERS = [
    pytest.param(None, id="current-user"),
    pytest.param(
        NOBODY,
        id="nobody",
        marks=pytest.mark.skipif(not IS_ROOT, reason="switching to nobody needs root"),
    ),
]


@pytest.mark.slow  # 1-3 s: a child interpreter and eight commands per user
@pytest.mark.parametrize("uid", WORKER_USERS)
def test_a_command_cannot_read_the_workers_secrets(tmp_path: Path, uid: int | None) -> None:
    secret = f"s3cr3t-{secrets.token_hex(12)}"
    api_key = f"sk-test-{secrets.token_hex(12)}"
    decoy = f"decoy-{secrets.token_hex(12)}"
    workspace = made(tmp_path / "ws")
    report = _run_worker(
        workspace, uid, {SECRET_NAME: secret, API_KEY_NAME: api_key}, _probes(secret, decoy)
    )
    probes = report["probes"]
    everything = json.dumps(probes)
    assert secret not in everything and api_key not in everything, _shown(probes)
    if uid is not None:
        assert report["uid"] == uid
        assert report["dumpable_before"] == 1  # it started readable: the guard made the difference
    assert report["dumpable_after"] == 0
    # The probes reached the worker and the kernel refused them ...
    refused = ["environ", "threads", "mem"] if "mem" in probes else ["environ", "threads"]
    for name in refused:
        assert "Permission denied" in probes[name]["output"], _shown(probes)
    assert f"pid {report['pid']}\n" in probes["chain"]["output"], _shown(probes)
    # ... while the very same probes read a same-uid process that is not guarded.
    assert f"FILEGATE_DECOY={decoy}" in probes["control"]["output"], _shown(probes)
    if "mem" in probes:
        assert "FOUND in memory" in probes["mem_control"]["output"], _shown(probes)
    assert SECRET_NAME not in probes["env"]["output"]


def _shown(probes: dict[str, Any]) -> str:
    return "\n".join(f"--- {name}: {r['output']!r} {r['error']!r}" for name, r in probes.items())


@pytest.mark.slow
@pytest.mark.skipif(not IS_ROOT, reason="the capability drop applies to a root worker only")
def test_a_root_command_runs_as_root_without_capabilities(tmp_path: Path) -> None:
    from filegate.processes.guard import capability_sets, is_dumpable

    shell = LocalShellBackend(tmp_path)
    assert is_dumpable() is False
    status = shell.execute("grep -E '^(Cap|NoNewPrivs)' /proc/self/status; id -u")
    assert status.ok and status.exit_code == 0, status
    fields = dict(line.split(":\t") for line in status.output.splitlines()[:-1])
    assert fields == {
        "CapInh": "0000000000000000",
        "CapPrm": "0000000000000000",
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
        "CapAmb": "0000000000000000",
        "NoNewPrivs": "1",
    }, status.output
    assert status.output.splitlines()[-1] == "0"  # still uid 0
    assert capability_sets()["effective"] != 0  # the worker itself keeps its capabilities

    shell.write("/given.txt", "from the worker\n")
    made = shell.execute("cat given.txt; echo made by the command > made.txt; mkdir -p d/e")
    assert made.exit_code == 0 and made.output == "from the worker\n", made
    assert shell.read("/made.txt").lines == ["made by the command"]
    assert (tmp_path / "d" / "e").is_dir() and (tmp_path / "made.txt").stat().st_uid == 0
    assert shell.execute("chown 1:1 made.txt").exit_code != 0  # CAP_CHOWN is gone too


@pytest.mark.skipif(not IS_ROOT, reason="the capability drop applies to a root worker only")
def test_nothing_runs_when_the_capabilities_cannot_be_dropped(tmp_path: Path) -> None:
    """A root worker without CAP_SETPCAP in its bounding set cannot empty the command's."""
    code = (
        "import ctypes, json, sys\n"
        "from filegate.backends.local_shell import LocalShellBackend\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.prctl(24, 8, 0, 0, 0) == 0  # PR_CAPBSET_DROP, CAP_SETPCAP\n"
        "result = LocalShellBackend(sys.argv[1]).execute('touch ran.txt')\n"
        "print(result.model_dump_json())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["code"] == "unsupported" and result["exit_code"] is None, result
    assert "could not drop the command's capabilities" in result["error"], result
    assert "CAP_SETPCAP" in result["error"], result
    assert not (tmp_path / "ran.txt").exists()
