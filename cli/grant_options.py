"""``filegate approve ... --remember [PATTERN] [--for DURATION]``: the options and the payload.

Apart from :mod:`~filegate.cli.grants` (the ``grants`` and ``revoke`` commands,
which use the approvals module's helpers) so that :mod:`~filegate.cli.approvals`
can add these options without importing its own dependants.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime
from typing import Any

from filegate.cli.errors import CliError
from filegate.workflows.approvals.grant_models import GRANT_SECONDS_MAX, Grant

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
"""``--for`` units: ``90s``, ``30m``, ``2h``, ``1d``, combined as ``1h30m``."""
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_BARE_SECONDS = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (``90``, ``90s``, ``30m``, ``1h30m``, ``1d``); CliError (exit 2)."""
    spelled = text.strip().lower()
    if _BARE_SECONDS.fullmatch(spelled):
        seconds = float(spelled)
    elif spelled and _DURATION.sub("", spelled) == "":
        seconds = sum(float(n) * DURATION_UNITS[u] for n, u in _DURATION.findall(spelled))
    else:
        raise CliError(f"--for {text!r}: give a duration such as 90s, 30m, 2h or 1h30m", 2)
    if seconds <= 0:
        raise CliError(f"--for {text!r}: a duration must be longer than 0", 2)
    if not seconds <= GRANT_SECONDS_MAX:  # also NaN and inf
        raise CliError(f"--for {text!r}: the longest grant is ten years", 2)
    return seconds


def add_remember_options(parser: argparse.ArgumentParser) -> None:
    """``approve``'s ``--remember [PATTERN]`` and ``--for DURATION``."""
    parser.add_argument(
        "--remember", nargs="?", const="", metavar="PATTERN",
        help="also approve later calls of this tool that the same rule would ask about: "
        "within the rule's pattern, or PATTERN under it (execute: the exact command, "
        "or a command glob such as 'pytest *')",
    )  # fmt: skip
    parser.add_argument(
        "--for", dest="remember_for", metavar="DURATION",
        help="with --remember: how long (90s, 30m, 2h, 1h30m; default: the rest of the run)",
    )  # fmt: skip


def remember_payload(args: argparse.Namespace) -> dict[str, Any] | None:
    """``Decision.remember`` from the options, or None when ``--remember`` is not given."""
    pattern = getattr(args, "remember", None)
    duration = getattr(args, "remember_for", None)
    if pattern is None:
        if duration is not None:
            raise CliError("--for goes with --remember", 2)
        return None
    if getattr(args, "all", False):
        raise CliError("--remember goes with one approval ID, not --all", 2)
    remember: dict[str, Any] = {}
    if pattern:
        remember["pattern"] = pattern
    if duration is not None:
        remember["duration_seconds"] = parse_duration(duration)
    return remember


def shown_status(grant: dict[str, Any], now: datetime | None = None) -> str:
    """A listed grant's status, ``expired`` also when its end passed since the
    workflow's last task (the query answers as of that task's time)."""
    status = str(grant.get("status") or "active")
    expires = grant.get("expires_at")
    ended = bool(expires) and datetime.fromisoformat(str(expires)) <= (now or datetime.now(UTC))
    return "expired" if status == "active" and ended else status


def grant_line(grant: dict[str, Any]) -> str:
    """``grant g-1a2b3c4d: write_file /docs/** by ana via cli, for the rest of the run``."""
    return f"grant {grant['id']}: {Grant.model_validate(grant).summary()}"
