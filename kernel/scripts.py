"""The scripted model's script by reference (contract §10): what a model call names it by.

A scripted run's script lives in its input (``ModelSpec.options["script"]``) and
used to travel in every model request: encoded by the workflow, decoded and
validated by the activity, each call, so a step cost more the longer the script
(and the run) was. Once a script is larger than :data:`SCRIPT_BY_REFERENCE_OVER`,
the first call still sends it inline; the activity answers with a
:class:`ScriptRef` and every later call of the run chain names the script by it.

Pure pydantic models and constants, so the workflow can import them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from filegate.kernel import wire
from filegate.kernel.artifacts import ArtifactRef

SCRIPT_BY_REFERENCE_OVER = 8 * 1024
"""Bytes of canonical JSON above which a script is named by reference after the first
call (the payload codec's threshold: a larger inline script would also leave history)."""
SCRIPT_UNAVAILABLE = wire.SCRIPT_UNAVAILABLE_ERROR
"""Error type of a model call naming a script this worker neither holds nor can fetch:
the workflow sends the script inline once more."""


class ScriptRef(BaseModel):
    """A parsed script's identity (sha256 of its canonical JSON) and where to get it.

    ``artifact`` None: only the worker that answered the call holds it (a local
    call without an artifact store); else the canonical JSON in the artifact
    store, under the run chain, so any agent worker of the chain can fetch it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    """Bytes of the canonical JSON."""
    artifact: ArtifactRef | None = None


def canonical_script(data: Any) -> bytes:
    """The script's canonical JSON (sorted keys, no spaces): what its sha256 is of.

    Raises what ``json.dumps`` raises (TypeError, ValueError, RecursionError).
    """
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def script_digest(canonical: bytes) -> str:
    return hashlib.sha256(canonical).hexdigest()
