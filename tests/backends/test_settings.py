"""The settings groups: the environment variables they read, and the docs' table of them.

Why: the flat ``Settings`` was split by owner (Temporal, S3, journal, command
bounds, model profiles) without renaming a variable; deployments set these
names. Each field names its variable once (``Env`` beside the field); these
tests pin the names to the ones the flat model produced and keep the table in
docs/configuration.md in step with the code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import SecretStr

from filegate.backends.settings import (
    ENV_PREFIX,
    CommandSettings,
    Env,
    JournalSettings,
    ModelSettings,
    S3Settings,
    Settings,
    SettingsGroup,
    TemporalSettings,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DOC = ROOT / "docs" / "configuration.md"

FLAT = {
    "temporal_address": ("temporal.address", "temporal.example:7233", "temporal.example:7233"),
    "temporal_namespace": ("temporal.namespace", "agents", "agents"),
    "task_queue": ("temporal.task_queue", "my-agents", "my-agents"),
    "s3_endpoint": ("s3.endpoint", "minio:9000", "minio:9000"),
    "s3_access_key": ("s3.access_key", "AKID", "AKID"),
    "s3_secret_key": ("s3.secret_key", "s3cr3t-value", SecretStr("s3cr3t-value")),
    "s3_bucket": ("s3.bucket", "team", "team"),
    "s3_secure": ("s3.secure", "true", True),
    "s3_outage_seconds": ("s3.outage_seconds", "30", 30.0),
    "artifact_expire_days": ("s3.artifact_expire_days", "7", 7),
    "state_dir": ("journal.state_dir", "/var/lib/filegate", Path("/var/lib/filegate")),
    "journal_fsync": ("journal.fsync", "1", True),
    "model_profiles": ("models.profiles", '{"x": {"kind": "openai"}}', '{"x": {"kind": "openai"}}'),
    "model_profiles_file": ("models.profiles_file", "/etc/fg.json", Path("/etc/fg.json")),
    "exec_memory": ("commands.memory", "2GiB", 2 << 30),
    "exec_max_processes": ("commands.max_processes", "16", 16),
    "exec_file_size": ("commands.file_size", "1MiB", 1 << 20),
    "exec_command_memory": ("commands.command_memory", "0", 0),
    "exec_write_size": ("commands.write_size", "512MiB", 512 << 20),
    "sandbox_tmp_size": ("commands.sandbox_tmp_size", "8MiB", 8 << 20),
    "exec_max_seconds": ("commands.max_seconds", "60", 60.0),
    "allow_execute_with_policies": ("commands.allow_execute_with_policies", "yes", True),
}
"""Each field of the flat ``Settings`` of earlier versions -> (where it lives now, a
value set in the environment, the value the setting must then hold). The flat
model read ``FILEGATE_`` + the field name upper-cased: those are the names below."""

SINCE = {"journal.embedded_shared_host": "FILEGATE_EMBEDDED_SHARED_HOST"}
"""Settings added after the split into groups, with their variables."""


def _get(settings: Settings, key: str) -> Any:
    group, field = key.split(".")
    return getattr(getattr(settings, group), field)


def test_every_old_variable_reaches_its_new_setting() -> None:
    environ = {ENV_PREFIX + old.upper(): raw for old, (_, raw, _) in FLAT.items()}
    settings = Settings.from_env(environ)
    for old, (key, raw, expected) in FLAT.items():
        assert _get(settings, key) == expected, (ENV_PREFIX + old.upper(), raw, key)
        assert _get(settings, key) != _get(Settings(), key), f"{key}: pick a non-default value"
    # No setting reads a variable the flat model did not, and none was dropped.
    names = {key: env.name for key, env in Settings.env_names().items()}
    flat = {key: ENV_PREFIX + old.upper() for old, (key, _, _) in FLAT.items()}
    assert names == {**flat, **SINCE}


def test_one_variable_set_alone_changes_only_its_setting() -> None:
    defaults = Settings()
    for old, (key, raw, expected) in FLAT.items():
        settings = Settings.from_env({ENV_PREFIX + old.upper(): raw})
        assert _get(settings, key) == expected, old
        changed = [k for k in FLAT.values() if _get(settings, k[0]) != _get(defaults, k[0])]
        assert [k[0] for k in changed] == [key], old


def test_fallbacks_empty_values_and_secrets() -> None:
    plain = Settings.from_env({"TEMPORAL_ADDRESS": "t:1", "TEMPORAL_NAMESPACE": "ns"})
    assert (plain.temporal.address, plain.temporal.namespace) == ("t:1", "ns")
    both = {"TEMPORAL_ADDRESS": "t:1", "FILEGATE_TEMPORAL_ADDRESS": "fg:2"}
    assert Settings.from_env(both).temporal.address == "fg:2"
    blank = {"FILEGATE_TEMPORAL_ADDRESS": " ", "TEMPORAL_ADDRESS": "t:1"}
    assert Settings.from_env(blank).temporal.address == "t:1"  # empty counts as unset
    assert Settings.from_env({"FILEGATE_S3_ENDPOINT": ""}).s3.endpoint is None
    secret = Settings.from_env({"FILEGATE_S3_SECRET_KEY": "hidden-value"})
    for shown in (secret, secret.s3):
        assert "hidden-value" not in repr(shown) and "hidden-value" not in str(shown)


def test_groups_read_alone_agree_with_settings() -> None:
    environ = {ENV_PREFIX + old.upper(): raw for old, (_, raw, _) in FLAT.items()}
    settings = Settings.from_env(environ)
    for name, group in Settings.groups().items():
        assert group.from_env(environ) == getattr(settings, name), name


def test_a_bad_value_names_its_setting() -> None:
    with pytest.raises(ValueError, match=r"s3\.secure"):
        Settings.from_env({"FILEGATE_S3_SECURE": "maybe"})
    with pytest.raises(ValueError, match=r"commands\.max_seconds"):
        Settings.from_env({"FILEGATE_EXEC_MAX_SECONDS": "0"})


def test_groups_are_frozen_and_compose() -> None:
    settings = Settings(journal=JournalSettings(fsync=True))
    assert settings.journal.fsync and settings.s3 == S3Settings()
    with pytest.raises(ValueError):
        settings.journal.fsync = False  # type: ignore[misc]
    with pytest.raises(ValueError):
        Settings(journal_fsync=True)  # type: ignore[call-arg]  # the flat keywords are gone
    assert set(Settings.groups().values()) == {
        TemporalSettings, S3Settings, JournalSettings, CommandSettings, ModelSettings
    }  # fmt: skip


def test_command_settings_build_the_bounds() -> None:
    bounds = CommandSettings(memory=1 << 20, max_seconds=5).bounds()  # type: ignore[arg-type]
    assert (bounds.memory_bytes, bounds.max_seconds) == (1 << 20, 5)
    assert bounds.write_bytes == CommandSettings().write_size


def test_a_field_without_its_variable_is_refused() -> None:
    with pytest.raises(TypeError, match="exactly one Env"):

        class Unnamed(SettingsGroup):
            value: int = 0

    with pytest.raises(TypeError, match="lacks FILEGATE_"):

        class Unprefixed(SettingsGroup):
            value: Annotated[int, Env("VALUE")] = 0


def _doc_rows() -> dict[str, str]:
    """The settings table of docs/configuration.md: ``group.field`` -> its row."""
    rows = {}
    for line in CONFIG_DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and re.fullmatch(r"`\w+\.\w+`", cells[1]):
            rows[cells[1].strip("`")] = cells[0]
    return rows


def test_the_docs_table_lists_every_setting_with_its_variable() -> None:
    rows = _doc_rows()
    env_names = Settings.env_names()
    assert set(rows) == set(env_names), "docs/configuration.md's settings table vs the code"
    for key, env in env_names.items():
        assert f"`{env.name}`" in rows[key], (key, env.name)
        if env.fallback:
            assert f"`{env.fallback}`" in rows[key], (key, env.fallback)
