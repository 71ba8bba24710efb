"""Ports for servers a test starts in another process, bound only later.

A port from ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range,
the same range every other test's servers (and their internal listeners) draw
from, so between the pick and the bind another test's server may take it; a
``filegate dev`` handed such a port then finds "a Temporal already running" and
reuses it. Ports picked here lie below the ephemeral range, in a block of its
own per xdist worker, so only this helper hands them out and no two workers
share one.
"""

from __future__ import annotations

import os
import random
import socket

BLOCK = 1500
FIRST = 10_000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def quiet_port() -> int:
    """A free loopback port no other test process is handed (see the module doc)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    low = FIRST + index * BLOCK
    if low + BLOCK <= _ephemeral_low():
        for port in random.sample(range(low, low + BLOCK), 200):
            if _free(port):
                return port
    with socket.socket() as sock:  # no room below the ephemeral range: the usual way
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
