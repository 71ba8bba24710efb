"""Scripts by reference on the agent worker (:mod:`filegate.kernel.scripts`).

A scripted run's first model call brings its script inline; when the script is
large, the model activity answers with a :class:`ScriptRef` and the workflow
names the script by it from then on, so a call no longer costs what encoding,
decoding and validating the whole script cost (a long run's script grows with
the run). The parsed script stays in the worker's
:data:`~filegate.activities.providers.scripted.SCRIPTS`; with an artifact store
the canonical JSON is also stored under the run chain, so another agent worker
(a restart, a regular activity landing elsewhere) can fetch it. A worker that
can do neither answers ``ScriptUnavailable`` and the workflow sends the script
inline once more.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from temporalio.exceptions import ApplicationError

from filegate.activities.providers.scripted import SCRIPTS, Parsed, script_unavailable
from filegate.backends.artifacts import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactNotFound,
)
from filegate.kernel import wire
from filegate.kernel.artifacts import ArtifactRef
from filegate.kernel.messages import ModelRequest
from filegate.kernel.scripts import SCRIPT_BY_REFERENCE_OVER, ScriptRef, canonical_script

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore

SCRIPT_KEY_PREFIX = "script"
"""Artifact key ``script/<sha256>`` under the run chain: the canonical JSON."""
FOREIGN_SCRIPT = wire.FOREIGN_SCRIPT_ERROR
"""A script reference into another run chain's objects (contract §11): refused."""
STORED_REFS_KEPT = 256
"""(run chain, script) pairs whose stored object this worker remembers (it stores
each once; a forgotten one is stored again, with the same bytes)."""


def _script_key(sha256: str) -> str:
    return f"{SCRIPT_KEY_PREFIX}/{sha256}"


class ScriptShelf:
    """Resolves the script refs model calls bring and hands out refs for large scripts."""

    def __init__(self, store: ArtifactStore | None) -> None:
        self.store = store
        self._stored: OrderedDict[tuple[str, str], ArtifactRef] = OrderedDict()
        self._lock = threading.Lock()

    async def prepare(self, request: ModelRequest, scope: str, *, local: bool) -> ScriptRef | None:
        """Make ``request``'s script ready for the scripted provider; the ref to hand back.

        A request naming its script: make sure this worker holds it (fetching it
        from the store when it can), else ``ScriptUnavailable``. An inline script
        over :data:`SCRIPT_BY_REFERENCE_OVER`: its ref (stored under the run
        chain ``scope`` with a store; without one only for a local call, whose
        next call runs on this worker too). Otherwise None. Call it right before
        the provider, so the script is held when the provider looks it up.
        """
        if request.script is not None:
            await self._hold(request.script, scope)
            return None
        source = request.model.options.get("script")
        if source is None:
            return None
        parsed = SCRIPTS.parse(source, "inline script")
        if not parsed.sha256 or parsed.size <= SCRIPT_BY_REFERENCE_OVER:
            return None
        if self.store is None:
            return ScriptRef(sha256=parsed.sha256, size=parsed.size) if local else None
        artifact = await self._stored_artifact(scope, parsed, source)
        return ScriptRef(sha256=parsed.sha256, size=parsed.size, artifact=artifact)

    async def _hold(self, ref: ScriptRef, scope: str) -> None:
        if SCRIPTS.get(ref.sha256) is not None:
            return
        artifact = ref.artifact
        if artifact is None or self.store is None:
            raise script_unavailable(ref.sha256)
        if artifact.workflow_id != scope:
            raise ApplicationError(
                f"script {artifact.key} belongs to another run chain",
                type=FOREIGN_SCRIPT,
                non_retryable=True,
            )
        if artifact.sha256 != ref.sha256:
            raise script_unavailable(ref.sha256)
        try:
            data = await asyncio.to_thread(self.store.get, artifact)
        except (ArtifactNotFound, ArtifactIntegrityError, ArtifactAccessError):
            raise script_unavailable(ref.sha256) from None
        parsed = SCRIPTS.parse(data.decode(), "stored script")
        if parsed.sha256 != ref.sha256:
            raise script_unavailable(ref.sha256)

    async def _stored_artifact(self, scope: str, parsed: Parsed, source: object) -> ArtifactRef:
        """The script's object under ``scope``, stored once per worker and chain."""
        store = self.store
        assert store is not None
        with self._lock:
            found = self._stored.get((scope, parsed.sha256))
        if found is not None:
            return found
        data = canonical_script(json.loads(source) if isinstance(source, str) else source)
        artifact = await asyncio.to_thread(
            store.put, scope, _script_key(parsed.sha256), data, "application/json"
        )
        with self._lock:
            self._stored[(scope, parsed.sha256)] = artifact
            while len(self._stored) > STORED_REFS_KEPT:
                self._stored.popitem(last=False)
        return artifact
