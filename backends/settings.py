"""Typed runtime settings, grouped by the concern that owns them.

Why groups: one flat model handed Temporal, S3, journal, model and command
settings to every layer, so a function that needed one bucket name took (and
could read) everything. Each group below is its own frozen model, and a
consumer takes only its group: the S3 client and the artifact store take
:class:`S3Settings`, a journal its :class:`JournalSettings` values, a shell
backend the bounds of :class:`CommandSettings`, and so on. :class:`Settings`
composes the groups for the edges that need several (the CLI and
``FilegatePlugin``), which are also the only places that call ``from_env``.

Each field names its environment variable beside it (:class:`Env`), the one
place that name is spelled: ``from_env`` reads it, ``Settings.env_names()``
lists them for the docs' table and the tests, and a group whose field lacks one
fails at import. Secrets are ``SecretStr`` so they never show up in a repr.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Self

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


@dataclass(frozen=True)
class Env:
    """Field metadata: the environment variable a setting is read from.

    ``fallback``: an un-prefixed variable honoured when ``name`` is unset or
    empty, so a shell configured for the ``temporal`` CLI points Filegate at
    the same server."""

    name: str
    fallback: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The variables to try, the one that wins first."""
        return (self.name,) if self.fallback is None else (self.name, self.fallback)


class SettingsGroup(BaseModel):
    """One concern's settings: frozen, every field read from the variable its
    :class:`Env` names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for field in cls.model_fields:
            env = cls.env(field)  # raises for a field without exactly one Env
            if not env.name.startswith(ENV_PREFIX):
                raise TypeError(f"{cls.__name__}.{field}: {env.name} lacks {ENV_PREFIX}")

    @classmethod
    def env(cls, field: str) -> Env:
        """The :class:`Env` of ``field``."""
        found = [m for m in cls.model_fields[field].metadata if isinstance(m, Env)]
        if len(found) != 1:
            raise TypeError(f"{cls.__name__}.{field} needs exactly one Env(...) annotation")
        return found[0]

    @classmethod
    def env_name(cls, field: str) -> str:
        """The ``FILEGATE_*`` variable of ``field`` (for messages naming it)."""
        return cls.env(field).name

    @classmethod
    def env_values(cls, environ: Mapping[str, str]) -> dict[str, str]:
        """The raw values ``environ`` sets for this group's fields, by field.

        ``FILEGATE_<...>`` wins over the un-prefixed fallback; empty values
        count as unset so ``FILEGATE_S3_ENDPOINT=`` restores the default."""
        values: dict[str, str] = {}
        for field in cls.model_fields:
            for key in cls.env(field).names:
                raw = environ.get(key, "").strip()
                if raw:
                    values[field] = raw
                    break
        return values

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """This group from ``environ`` (default ``os.environ``); an edge's call only."""
        return cls.model_validate(cls.env_values(os.environ if environ is None else environ))


class TemporalSettings(SettingsGroup):
    """Which Temporal frontend to connect to, and the agent's default task queue.

    Its own group because connecting is a concern of its own: ``connect`` and
    the CLI's target resolution (which also reads the ``temporal`` CLI's profile)
    use it, and nothing below the wiring layer needs a Temporal address."""

    address: Annotated[str, Env("FILEGATE_TEMPORAL_ADDRESS", fallback="TEMPORAL_ADDRESS")] = (
        "127.0.0.1:7233"
    )
    namespace: Annotated[str, Env("FILEGATE_TEMPORAL_NAMESPACE", fallback="TEMPORAL_NAMESPACE")] = (
        "default"
    )
    task_queue: Annotated[str, Env("FILEGATE_TASK_QUEUE")] = "filegate-agent"
    """The agent workflows' queue (``filegate worker --role agent``, ``submit``, ``mcp``)."""


class S3Settings(SettingsGroup):
    """Where the S3 server is, with its credentials, and how artifacts live there.

    Its own group because its consumers (the S3 client, the artifact store, the
    store backend, the dev stack's S3 lease) need nothing else, and because it
    holds the only secret: a function that takes ``S3Settings`` is visibly one
    that can reach the bucket. Every process must share it (docs/configuration.md)."""

    endpoint: Annotated[str | None, Env("FILEGATE_S3_ENDPOINT")] = None
    """None: no external S3 configured (callers start the embedded server)."""
    access_key: Annotated[str | None, Env("FILEGATE_S3_ACCESS_KEY")] = None
    secret_key: Annotated[SecretStr | None, Env("FILEGATE_S3_SECRET_KEY")] = None
    bucket: Annotated[str, Env("FILEGATE_S3_BUCKET")] = "filegate"
    """The store backend's bucket; artifacts go to ``<bucket>-artifacts``."""
    secure: Annotated[bool, Env("FILEGATE_S3_SECURE")] = False
    outage_seconds: Annotated[float, Env("FILEGATE_S3_OUTAGE_SECONDS"), Field(ge=0)] = (
        DEFAULT_S3_OUTAGE_SECONDS
    )
    """How long one artifact-store call waits out an S3 outage before it fails."""
    artifact_expire_days: Annotated[
        int | None, Env("FILEGATE_ARTIFACT_EXPIRE_DAYS"), Field(ge=0)
    ] = None
    """Days after which artifacts expire (the lifecycle rule workers install);
    unset: the Temporal namespace's retention, rounded up; 0: no rule."""


class JournalSettings(SettingsGroup):
    """Where local state lives and how durable the idempotency journal is.

    Its own group because the journal (a tools worker's record of mutating
    calls, ``activities.idempotency``) is owned by the process that serves the
    backend, not by the workflow or S3 side. The state directory also holds the
    embedded dev stack's data (``filegate run`` / ``dev``)."""

    state_dir: Annotated[Path, Env("FILEGATE_STATE_DIR")] = Path(".filegate")
    fsync: Annotated[bool, Env("FILEGATE_JOURNAL_FSYNC")] = False
    """Flush each idempotency-journal entry to disk (power-cut durability)."""
    embedded_shared_host: Annotated[bool, Env("FILEGATE_EMBEDDED_SHARED_HOST")] = False
    """Start the embedded stack (kept in the state directory) even while other people
    are logged in on this host; its servers take no login (``cli.shared_host``)."""


class CommandSettings(SettingsGroup):
    """The bounds of one ``execute`` call (contract §11) and the consent to serve an
    executing backend under path policies; a size or count of 0: no limit.

    Its own group because only a worker serving a shell (local-shell, sandbox)
    uses it: :meth:`bounds` builds the ``CommandBounds`` process supervision
    enforces (``filegate.processes.reaper``, which knows nothing of settings)."""

    memory: Annotated[ByteSize, Env("FILEGATE_EXEC_MEMORY")] = ByteSize(
        DEFAULT_EXECUTE_MEMORY_BYTES
    )
    """Memory per process (``RLIMIT_DATA``)."""
    max_processes: Annotated[int, Env("FILEGATE_EXEC_MAX_PROCESSES"), Field(ge=0)] = (
        DEFAULT_EXECUTE_MAX_PROCESSES
    )
    file_size: Annotated[ByteSize, Env("FILEGATE_EXEC_FILE_SIZE")] = ByteSize(
        DEFAULT_EXECUTE_FILE_BYTES
    )
    command_memory: Annotated[ByteSize, Env("FILEGATE_EXEC_COMMAND_MEMORY")] = ByteSize(
        DEFAULT_EXECUTE_COMMAND_MEMORY_BYTES
    )
    """All processes of one command together (a cgroup per command, where there is one)."""
    write_size: Annotated[ByteSize, Env("FILEGATE_EXEC_WRITE_SIZE")] = ByteSize(
        DEFAULT_EXECUTE_WRITE_BYTES
    )
    """Bytes one command may write to disk (``--max-command-write-bytes``)."""
    sandbox_tmp_size: Annotated[ByteSize, Env("FILEGATE_SANDBOX_TMP_SIZE")] = ByteSize(
        DEFAULT_SANDBOX_TMP_BYTES
    )
    max_seconds: Annotated[float, Env("FILEGATE_EXEC_MAX_SECONDS"), Field(gt=0)] = (
        DEFAULT_MAX_EXECUTE_TIMEOUT
    )
    allow_execute_with_policies: Annotated[bool, Env("FILEGATE_ALLOW_EXECUTE_WITH_POLICIES")] = (
        False
    )
    """Serve an executing backend under path policies anyway (a shell ignores them)."""

    def bounds(self) -> CommandBounds:
        """The bounds of one execute call.

        Here rather than on :class:`~filegate.processes.reaper.CommandBounds`:
        process supervision knows nothing of the backends' settings."""
        from filegate.processes.reaper import CommandBounds

        return CommandBounds(
            memory_bytes=int(self.memory),
            max_processes=self.max_processes,
            file_bytes=int(self.file_size),
            command_memory_bytes=int(self.command_memory),
            write_bytes=int(self.write_size),
            tmp_bytes=int(self.sandbox_tmp_size),
            max_seconds=self.max_seconds,
        )


class ModelSettings(SettingsGroup):
    """The agent worker's model profiles (``activities.providers.profiles``).

    Its own group because only the side that calls models (an agent worker, a
    co-hosting tools worker) reads it; neither set: the default profiles."""

    profiles: Annotated[str | None, Env("FILEGATE_MODEL_PROFILES")] = None
    """The profiles as JSON."""
    profiles_file: Annotated[Path | None, Env("FILEGATE_MODEL_PROFILES_FILE")] = None
    """The same, read from a JSON file."""


class Settings(BaseModel):
    """Every group, for the edges that wire several concerns together (the CLI,
    ``FilegatePlugin``); each group defaults to its own defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    s3: S3Settings = Field(default_factory=S3Settings)
    journal: JournalSettings = Field(default_factory=JournalSettings)
    commands: CommandSettings = Field(default_factory=CommandSettings)
    models: ModelSettings = Field(default_factory=ModelSettings)

    @classmethod
    def groups(cls) -> dict[str, type[SettingsGroup]]:
        """The groups by attribute name (``"s3"`` -> :class:`S3Settings`)."""
        groups: dict[str, type[SettingsGroup]] = {}
        for name, info in cls.model_fields.items():
            assert isinstance(info.annotation, type) and issubclass(info.annotation, SettingsGroup)
            groups[name] = info.annotation
        return groups

    @classmethod
    def env_names(cls) -> dict[str, Env]:
        """Every variable the settings read, by ``group.field`` (``"s3.endpoint"``)."""
        return {
            f"{name}.{field}": group.env(field)
            for name, group in cls.groups().items()
            for field in group.model_fields
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Every group from ``environ`` (default ``os.environ``), validated at once so
        a bad value is reported as ``group.field``."""
        env = os.environ if environ is None else environ
        return cls.model_validate({name: g.env_values(env) for name, g in cls.groups().items()})
