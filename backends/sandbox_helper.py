"""The fixed Python helper every sandbox file operation runs, and its reply format.

The script runs inside the sandbox as ``python3 -I -S -c <HELPER_SCRIPT>``. It
is constant text (never formatted with caller data); argv: workspace,
operation, base64(marshal(parameters)) [, base64(upload bytes)]. It imports
only built-in modules, because interpreter start-up is most of an
operation's cost. Its reply is one ASCII line of JSON after
:data:`REPLY_MARK`, every string and byte string in it base64-encoded.

The script and the host-side decoding live together so the two ends of this
small wire protocol change together; :mod:`filegate.backends.sandbox` only
runs it.
"""

from __future__ import annotations

import base64
from pathlib import Path

REPLY_MARK = "@@filegate-reply@@ "
"""Marks the reply line; the script below writes the same literal."""

_SCRIPT_FILE = Path(__file__).with_name("sandbox_helper_script.py")
HELPER_SCRIPT = _SCRIPT_FILE.read_text(encoding="utf-8")
"""The helper's source (:file:`sandbox_helper_script.py`), run with ``-c``: constant
text, never formatted with caller data."""


def reply_bytes(value: str) -> bytes:
    """A byte string from the helper's reply (every string there is base64)."""
    return base64.b64decode(value, validate=True)


def reply_text(value: str) -> str:
    """A text string from the helper's reply."""
    return reply_bytes(value).decode("utf-8", "surrogatepass")
