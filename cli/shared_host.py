"""Who else is logged in on this host: the embedded stack refuses to start beside them.

Why: the embedded Temporal and S3 servers listen on loopback without a login
(docs/threat-model.md). Any local user can reach them: read what the agent
read, decide its approvals. On a machine only its owner uses that is the
owner's own loopback; with other people logged in it is an open door. So the
commands that start an embedded server refuse in one line while other people
are logged in, unless the user says the host is trusted
(``FILEGATE_EMBEDDED_SHARED_HOST=1``) or points at a deployment.

Who counts: a logged-in person other than this user and root (root can read
this user's files anyway) and not a system account (uid below 1000, such as a
display manager's greeter). Two sources, since hosts keep either: utmp's live
user-process records (terminals, ssh) and systemd-logind's per-user state files.
An unknown name in utmp counts: it cannot be shown to be this user.
"""

from __future__ import annotations

import os
import pwd
import struct
from pathlib import Path

from filegate.processes.guard import pid_alive

UTMP = Path("/run/utmp")
LOGIND_USERS = Path("/run/systemd/users")

FIRST_PERSON_UID = 1000
"""Accounts below this are the system's (login.defs' default ``UID_MIN``)."""

_RECORD = struct.Struct("<hxxi32s4s32s256s")
"""The head of glibc's 384-byte ``struct utmp``: type, pid, line, id, user, host."""
_RECORD_SIZE = 384
_USER_PROCESS = 7


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _utmp_users(path: Path) -> dict[str, int | None]:
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    users: dict[str, int | None] = {}
    for start in range(0, len(data) - _RECORD_SIZE + 1, _RECORD_SIZE):
        kind, pid, _, _, raw, _ = _RECORD.unpack_from(data, start)
        name = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        if kind == _USER_PROCESS and name and pid_alive(pid):
            users[name] = _uid_of(name)
    return users


def _logind_users(folder: Path) -> dict[str, int | None]:
    try:
        entries = [entry.name for entry in folder.iterdir()]
    except OSError:
        return {}
    users: dict[str, int | None] = {}
    for name in entries:
        if name.isdigit():
            uid = int(name)
            try:
                users[pwd.getpwuid(uid).pw_name] = uid
            except KeyError:
                users[name] = uid
    return users


def other_people(
    uid: int | None = None, utmp: Path | None = None, logind: Path | None = None
) -> list[str]:
    """Names of the people other than ``uid`` (default: this process's) logged in here."""
    own = os.geteuid() if uid is None else uid
    found = {**_utmp_users(utmp or UTMP), **_logind_users(logind or LOGIND_USERS)}
    return sorted(
        name
        for name, user in found.items()
        if user is None or (user not in (own, 0) and user >= FIRST_PERSON_UID)
    )


def shared_host_refusal(people: list[str]) -> str:
    """The one line that refuses an embedded server beside ``people``."""
    shown = ", ".join(people[:5]) + (f" and {len(people) - 5} more" if len(people) > 5 else "")
    return (
        f"other people are logged in on this host ({shown}): the embedded Temporal and S3 "
        "servers take no login, so they could read what the agent reads and decide its "
        "approvals; use a deployment (TEMPORAL_ADDRESS, FILEGATE_S3_ENDPOINT) or set "
        "FILEGATE_EMBEDDED_SHARED_HOST=1 if you trust them (docs/threat-model.md)"
    )


__all__ = ["other_people", "shared_host_refusal"]
