"""``filegate dev`` as a subprocess: the shared stack, the approval UI, Temporal's Web UI."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from filegate.cli.services import DEV_PORT_ENV
from tests.ports import quiet_port

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _wait_for(out: Path, pattern: str, proc: subprocess.Popen[bytes], seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace")
        found = re.search(pattern, text)
        if found:
            return found.group(0)
        assert proc.poll() is None, text
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} in: {out.read_text(errors='replace')}")


def test_dev_serves_both_uis_and_stops_clean_on_sigterm(tmp_path: Path) -> None:
    ui_port, web_port = quiet_port(), quiet_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env |= {"FILEGATE_STATE_DIR": str(tmp_path / "state"), DEV_PORT_ENV: str(quiet_port())}
    out = tmp_path / "dev.out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "filegate", "dev", "--ui-port", str(ui_port),
         "--web-ui-port", str(web_port)],
        env=env, stdout=out.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        login = _wait_for(out, r"approval UI at (\S+)", proc).split(" at ", 1)[1]
        _wait_for(out, rf"Temporal Web UI at http://127\.0\.0\.1:{web_port}/", proc)
        with pytest.raises(urllib.error.HTTPError) as refused:  # no token, no page
            urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/", timeout=10)
        assert refused.value.code == 401
        assert "token=" in login
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        page = browser.open(login, timeout=10)  # logs in: session cookie, then the redirect
        assert page.status == 200 and b"csrf-token" in page.read()
        deadline = time.monotonic() + 30
        while True:  # the Web UI comes up a little after the server
            try:
                assert urllib.request.urlopen(f"http://127.0.0.1:{web_port}/", timeout=5).status
                break
            except OSError:
                assert time.monotonic() < deadline, "Temporal's Web UI never answered"
                time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=40)
    text = out.read_text(errors="replace")
    assert code in (0, 130), text
    assert "Traceback" not in text
    assert not list((tmp_path / "state").glob("stack-*.json")), "the stack must be released"
