"""``filegate artifacts``: the S3 artifact store's expiry, and garbage collection by age.

Workers call :func:`install_artifact_expiry` at start: a bucket lifecycle rule
expiring the store's objects after ``FILEGATE_ARTIFACT_EXPIRE_DAYS`` days, by
default the Temporal namespace's workflow retention rounded up to whole days,
plus a margin for runs still open (:data:`OPEN_RUN_MARGIN_DAYS`). An S3 server that refuses
lifecycle configuration costs one log line, not the worker: ``filegate
artifacts gc --older-than 7d`` does the same job by listing and deleting, for
a periodic job. ``filegate artifacts ls`` shows what is there. Both touch only
the store's own prefix (``<namespace>/``) in ``<FILEGATE_S3_BUCKET>-artifacts``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.service import RPCError

from filegate.backends.artifacts import (
    OPEN_RUN_MARGIN_DAYS,
    ArtifactError,
    LifecycleError,
    default_expiry_days,
)
from filegate.backends.settings import S3Settings
from filegate.cli.errors import CliError
from filegate.wiring.connection import configured_store

if TYPE_CHECKING:
    from temporalio.client import Client

    from filegate.backends.artifacts import ArtifactStore

log = logging.getLogger("filegate.artifacts")

EXPIRE_DAYS_ENV = S3Settings.env_name("artifact_expire_days")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
"""Units ``--older-than`` accepts, in seconds."""
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([a-z])")
_DURATION_HELP = "a number and a unit s, m, h, d or w, e.g. 30m, 12h, 7d"


def now() -> datetime:
    """The clock ``gc`` and ``ls`` measure ages against (tests replace it)."""
    return datetime.now(UTC)


def parse_duration(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d``, ``2w``, ``1.5h`` as a timedelta; ValueError otherwise."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not match or match.group(2) not in DURATION_UNITS:
        raise ValueError(f"bad duration {text!r}: use {_DURATION_HELP}")
    return timedelta(seconds=float(match.group(1)) * DURATION_UNITS[match.group(2)])


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """``artifacts gc`` and ``artifacts ls``; they talk to S3 only (no Temporal flags)."""
    group = sub.add_parser("artifacts", help="list or garbage-collect the S3 artifact store")
    actions = group.add_subparsers(dest="artifacts_command", required=True)
    gc = actions.add_parser(
        "gc",
        help="delete artifacts older than a duration (for S3 servers without lifecycle rules)",
    )
    gc.add_argument(
        "--older-than", required=True, metavar="DURATION", help=f"age to delete: {_DURATION_HELP}"
    )
    gc.add_argument("--dry-run", action="store_true", help="count only, delete nothing")
    gc.add_argument("--json", action="store_true", help="print the result as JSON")
    gc.set_defaults(handler=_gc_command)
    ls = actions.add_parser("ls", help="list the artifact objects (key, size, last modified)")
    ls.add_argument("--older-than", metavar="DURATION", help="only objects older than this")
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    ls.set_defaults(handler=_ls_command)


def _age(args: argparse.Namespace) -> timedelta | None:
    if args.older_than is None:
        return None
    try:
        return parse_duration(args.older_than)
    except ValueError as exc:
        raise CliError(f"--older-than: {exc}", 2) from None


async def _store() -> ArtifactStore:
    store = await configured_store(S3Settings.from_env())
    if store is None:
        raise CliError(
            f"no artifact store: set {S3Settings.env_name('endpoint')} and its credentials "
            "(the embedded S3 of `run` and `demo` is private to them)", 2,
        )  # fmt: skip
    return store


async def _gc_command(args: argparse.Namespace) -> int:
    age = _age(args)
    assert age is not None  # --older-than is required
    store = await _store()
    try:
        purge = await asyncio.to_thread(store.purge, age, now(), args.dry_run)
    except ArtifactError as exc:
        raise CliError(str(exc)) from None
    where = {"bucket": store.bucket, "prefix": store.namespace + "/"}
    if args.json:
        print(json.dumps({
            **where, "older_than_seconds": age.total_seconds(),
            "cutoff": purge.cutoff.isoformat(), "objects": purge.objects,
            "bytes": purge.bytes, "dry_run": purge.dry_run,
        }))  # fmt: skip
    else:
        verb = "would delete" if purge.dry_run else "deleted"
        print(
            f"{verb} {purge.objects} objects ({purge.bytes} bytes) last modified before "
            f"{purge.cutoff:%Y-%m-%d %H:%M:%S} UTC under {where['prefix']} in bucket "
            f"{store.bucket}"
        )
    return 0


async def _ls_command(args: argparse.Namespace) -> int:
    age = _age(args)
    store = await _store()
    try:
        objects = await asyncio.to_thread(store.objects, age, now())
    except ArtifactError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        rows = [
            {"key": o.key, "size": o.size, "last_modified": o.last_modified.isoformat()}
            for o in objects
        ]
        print(json.dumps(rows))
        return 0
    for o in objects:
        print(f"{o.last_modified:%Y-%m-%d %H:%M:%S}  {o.size:>12}  {o.key}")
    print(f"{len(objects)} objects in bucket {store.bucket}", file=sys.stderr)
    return 0


# -- the expiry rule a worker installs ---------------------------------------------


async def namespace_retention(client: Client) -> timedelta | None:
    """The client's namespace's workflow execution retention (None when it has none)."""
    request = DescribeNamespaceRequest(namespace=client.namespace)
    response = await client.workflow_service.describe_namespace(request)
    config = response.config
    if not config.HasField("workflow_execution_retention_ttl"):
        return None
    retention = config.workflow_execution_retention_ttl.ToTimedelta()
    return retention if retention > timedelta(0) else None


async def install_artifact_expiry(
    client: Client, store: ArtifactStore | None, s3: S3Settings
) -> str | None:
    """Install (idempotently) the store's expiry rule; the one line it logged.

    Never fails the worker: an unreadable retention or an S3 server refusing
    lifecycle configuration is logged as a warning naming the fallback
    (``filegate artifacts gc``). None without a store.
    """
    if store is None:
        return None
    days, source = s3.artifact_expire_days, EXPIRE_DAYS_ENV
    if days is None:
        fallback = f"set {EXPIRE_DAYS_ENV} or run `filegate artifacts gc` periodically"
        try:
            retention = await namespace_retention(client)
        except RPCError as exc:
            return _warn(
                f"artifact expiry not installed: cannot read the retention of namespace "
                f"{client.namespace} ({exc.message}); {fallback}"
            )
        if retention is None:
            return _warn(
                f"artifact expiry not installed: namespace {client.namespace} has no "
                f"retention; {fallback}"
            )
        days = default_expiry_days(retention)
        source = f"namespace {client.namespace} retention + {OPEN_RUN_MARGIN_DAYS} days"
    try:
        changed = await asyncio.to_thread(store.set_expiry, days)
    except LifecycleError as exc:
        gc = f"filegate artifacts gc --older-than {days}d" if days else "filegate artifacts gc"
        return _warn(f"artifact expiry not installed: {exc}; run `{gc}` periodically instead")
    where = f"{store.namespace}/ in bucket {store.bucket}"
    if days == 0:
        line = f"artifact expiry: none for {where} ({source}=0)"
    else:
        after = f"{days} day" if days == 1 else f"{days} days"
        line = f"artifact expiry: objects under {where} expire after {after} ({source})"
    line += "" if changed else ", already set"
    log.info("%s", line)
    return line


def _warn(line: str) -> str:
    log.warning("%s", line)
    return line
