"""Following a run through a short Temporal outage (``run``, ``submit``).

A Temporal frontend restarted (an upgrade, a crash, a dev server stopped for a
moment) is not the end of a run: its state is durable in the server's
database, and the co-hosted workers reconnect on their own. The command
following it only has to wait: it says once that Temporal is unreachable,
keeps trying for :func:`_outage_budget` seconds, says when it is back, and past
the budget gives up in one line that names the ``--resume`` command which
serves and follows the same run again.

A progress query that times out while Temporal itself answers is not an outage
of Temporal: the run's worker is busy (a workflow task that waits for S3 to
store or fetch a payload holds the run's queries until it completes). Calling
that "Temporal unreachable" sent people to look at the wrong server (issue 49),
so it is said as what it is, once per stretch, and costs no outage budget:
whatever the worker waits for, the run is durable and the command keeps
following.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable

from temporalio.service import RPCError, RPCStatusCode

from filegate.cli.errors import CliError

OUTAGE_ENV = "FILEGATE_TEMPORAL_OUTAGE_SECONDS"
"""How long ``run`` / ``submit`` wait for an unreachable Temporal before giving up."""

DEFAULT_OUTAGE_BUDGET = 60.0

TRANSIENT = frozenset({
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.UNKNOWN,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.ABORTED,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.INTERNAL,
})  # fmt: skip
"""What a frontend that is down, restarting or still loading answers (or the
transport says for it); NOT_FOUND, INVALID_ARGUMENT... are real answers."""


def _outage_budget() -> float:
    """Seconds of unreachable Temporal a command rides out (``FILEGATE_TEMPORAL_OUTAGE_SECONDS``,
    default 60); a bad value exits 2."""
    text = os.environ.get(OUTAGE_ENV, "").strip()
    if not text:
        return DEFAULT_OUTAGE_BUDGET
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise CliError(f"{OUTAGE_ENV} must be a number of seconds, not {text!r}", 2)
    return value


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` says Temporal could not be reached (rather than answered no)."""
    return isinstance(exc, RPCError) and exc.status in TRANSIENT


UNANSWERED = frozenset({RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED})
"""What a query that ran out of time answers: the frontend may be down, or up with
the run's worker not answering in time; a cheap call to the frontend tells which
(:func:`~filegate.cli.progress.follow`)."""


class Outage:
    """One stretch of unreachable Temporal, or of a silent worker, while following a run.

    ``failed`` on every call that could not reach Temporal (one line when the
    stretch starts; a :class:`CliError` naming ``resume`` once the budget is
    spent); ``unanswered`` on a query that timed out while Temporal answers
    (one line when such a stretch starts, no budget); ``ok`` on a query that
    got through (one line for each stretch it ends).
    """

    def __init__(
        self,
        write: Callable[[str], None],
        address: str,
        resume: str,
        budget: float | None = None,
    ) -> None:
        self.write = write
        self.address = address
        self.resume = resume
        self.budget = _outage_budget() if budget is None else budget
        self.since: float | None = None
        self.silent_since: float | None = None
        """When the run's worker stopped answering its queries (Temporal answering)."""

    def failed(self, exc: RPCError) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
            why = exc.message or exc.status.name
            self.write(
                f"  !! Temporal at {self.address} is unreachable ({why}): waiting for "
                f"Temporal up to {self.budget:g} s; the run itself is durable"
            )
        elif now - self.since > self.budget:
            raise CliError(
                f"Temporal at {self.address} unreachable for {now - self.since:.0f} s: stopped "
                f"following; the run is durable: once Temporal is back, `{self.resume}` "
                "serves and follows it again"
            )

    def reachable(self) -> None:
        """Temporal answered a call: a stretch of unreachable Temporal is over."""
        if self.since is not None:
            self.write(f"  .. Temporal is back after {time.monotonic() - self.since:.0f} s")
            self.since = None

    def unanswered(self) -> None:
        """A query timed out while Temporal answers: the run's worker is busy, or
        waits for S3 inside a workflow task. Said once per stretch; never the end
        of following, since nothing about the run is lost meanwhile."""
        self.reachable()
        if self.silent_since is None:
            self.silent_since = time.monotonic()
            self.write(
                "  !! the run's worker does not answer (busy, or waiting for S3 to store or "
                "fetch a payload): still following; Temporal itself answers"
            )

    def ok(self) -> None:
        """A query got through: Temporal and the run's worker both answer."""
        self.reachable()
        if self.silent_since is not None:
            waited = time.monotonic() - self.silent_since
            self.write(f"  .. the run's worker answers again after {waited:.0f} s")
            self.silent_since = None


def resume_command(workflow_id: str, argv: list[str] | None = None) -> str:
    """This command line as its ``--resume`` of ``workflow_id``: the same flags (the
    task and model are required, though a resumed run keeps its own), without
    ``--new-run`` or another ``--workflow-id``."""
    args = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--new-run", "--resume", "-v", "--verbose"):
            continue
        if arg == "--workflow-id":
            skip = True
            continue
        if arg.startswith("--workflow-id="):
            continue
        kept.append(arg)
    return shlex.join(["filegate", *kept, "--resume", "--workflow-id", workflow_id])
