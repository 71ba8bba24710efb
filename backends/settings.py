"""Typed runtime settings, read from ``FILEGATE_*`` environment variables.

One flat model so every entry point (worker CLI, dev stack, tests) agrees on
names and defaults. Fields are read generically: a field ``foo_bar`` comes from
``FILEGATE_FOO_BAR``, so adding a field is all it takes to make it configurable.
Secrets are ``SecretStr`` so they never show up in a repr or a log line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ByteSize, ConfigDict, Field, SecretStr

from filegate.kernel.limits import (
    DEFAULT_EXECUTE_COMMAND_MEMORY_BYTES,
    DEFAULT_EXECUTE_FILE_BYTES,
    DEFAULT_EXECUTE_MAX_PROCESSES,
    DEFAULT_EXECUTE_MEMORY_BYTES,
    DEFAULT_EXECUTE_WRITE_BYTES,
    DEFAULT_MAX_EXECUTE_TIMEOUT,
    DEFAULT_S3_OUTAGE_SECONDS,
    DEFAULT_SANDBOX_TMP_BYTES,
)

if TYPE_CHECKING:
    from filegate.processes.reaper import CommandBounds

ENV_PREFIX = "FILEGATE_"


class Settings(BaseModel):
    """Where the services are and how Filegate names its things."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    task_queue: str = "filegate-agent"

    # None means "no external S3 configured": callers start the embedded server.
    s3_endpoint: str | None = None
    s3_access_key: str | None = None
    s3_secret_key: SecretStr | None = None
    s3_bucket: str = "filegate"
    s3_secure: bool = False
    s3_outage_seconds: float = Field(default=DEFAULT_S3_OUTAGE_SECONDS, ge=0)
    """How long one artifact-store call waits out an S3 outage before it fails."""
    artifact_expire_days: int | None = Field(default=None, ge=0)
    """Days after which artifacts expire (the lifecycle rule workers install);
    unset: the Temporal namespace's retention, rounded up; 0: no rule."""

    state_dir: Path = Path(".filegate")
    journal_fsync: bool = False
    """Flush each idempotency-journal entry to disk (power-cut durability)."""

    model_profiles: str | None = None
    """The agent worker's model profiles as JSON (``activities.providers.profiles``)."""
    model_profiles_file: Path | None = None
    """The same, read from a JSON file. Neither set: the default profiles."""

    # Bounds of one execute call (contract §11, filegate.processes.reaper); 0: none.
    exec_memory: ByteSize = ByteSize(DEFAULT_EXECUTE_MEMORY_BYTES)
    exec_max_processes: int = Field(default=DEFAULT_EXECUTE_MAX_PROCESSES, ge=0)
    exec_file_size: ByteSize = ByteSize(DEFAULT_EXECUTE_FILE_BYTES)
    exec_command_memory: ByteSize = ByteSize(DEFAULT_EXECUTE_COMMAND_MEMORY_BYTES)
    """All processes of one command together (a cgroup per command, where there is one)."""
    exec_write_size: ByteSize = ByteSize(DEFAULT_EXECUTE_WRITE_BYTES)
    """Bytes one command may write to disk (``--max-command-write-bytes``)."""
    sandbox_tmp_size: ByteSize = ByteSize(DEFAULT_SANDBOX_TMP_BYTES)
    exec_max_seconds: float = Field(default=DEFAULT_MAX_EXECUTE_TIMEOUT, gt=0)
    allow_execute_with_policies: bool = False
    """Serve an executing backend under path policies anyway (a shell ignores them)."""

    # Un-prefixed variables honoured as fallbacks, so a shell configured for the
    # `temporal` CLI points Filegate at the same server.
    FALLBACK_ENV: ClassVar[Mapping[str, str]] = {
        "temporal_address": "TEMPORAL_ADDRESS",
        "temporal_namespace": "TEMPORAL_NAMESPACE",
    }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``environ`` (default ``os.environ``).

        ``FILEGATE_<FIELD>`` wins over the un-prefixed fallback; empty values
        count as unset so ``FILEGATE_S3_ENDPOINT=`` restores the default.
        """
        env = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for name in cls.model_fields:
            keys = [ENV_PREFIX + name.upper()]
            if name in cls.FALLBACK_ENV:
                keys.append(cls.FALLBACK_ENV[name])
            for key in keys:
                raw = env.get(key, "")
                if raw.strip():
                    values[name] = raw.strip()
                    break
        return cls.model_validate(values)

    def command_bounds(self) -> CommandBounds:
        """The bounds of one execute call: ``FILEGATE_EXEC_MEMORY`` /
        ``_EXEC_MAX_PROCESSES`` / ``_EXEC_FILE_SIZE`` / ``_EXEC_COMMAND_MEMORY`` /
        ``_EXEC_WRITE_SIZE`` / ``_SANDBOX_TMP_SIZE`` / ``_EXEC_MAX_SECONDS``.

        Here rather than on :class:`~filegate.processes.reaper.CommandBounds`:
        process supervision knows nothing of the backends' settings."""
        from filegate.processes.reaper import CommandBounds

        return CommandBounds(
            memory_bytes=int(self.exec_memory),
            max_processes=self.exec_max_processes,
            file_bytes=int(self.exec_file_size),
            command_memory_bytes=int(self.exec_command_memory),
            write_bytes=int(self.exec_write_size),
            tmp_bytes=int(self.sandbox_tmp_size),
            max_seconds=self.exec_max_seconds,
        )
