"""Model profiles: the agent worker's own configuration of which models it serves.

A workflow input names a profile (``ModelSpec.provider``) and a model; the
profile, configured here, decides the provider kind, the endpoint, the key's
environment variable and the allowed models (contract §11). Configure them with
``FILEGATE_MODEL_PROFILES`` (JSON) or ``FILEGATE_MODEL_PROFILES_FILE`` (a JSON
file), or pass :class:`ModelProfiles` to ``agent_worker(model_profiles=...)``:
``{"local": {"kind": "openai", "base_url": "http://127.0.0.1:8000/v1",
"api_key_env": "LOCAL_KEY", "models": ["llama"]}}``. Configured profiles
replace the defaults (:meth:`ModelProfiles.defaults`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.messages import ModelSpec, check_model_spec

if TYPE_CHECKING:
    from filegate.backends.settings import ModelSettings

PROFILE_ERROR_TYPE = wire.MODEL_PROFILE_ERROR

ProviderKind = Literal["openai", "anthropic", "scripted"]


class ModelProfile(BaseModel):
    """One model profile: provider kind, endpoint, key variable, allowed models.

    ``base_url`` None: the provider's variable in the worker's environment
    (``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``), else the SDK's default.
    ``api_key_env`` None: ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``. ``models``
    None: any model name. ``script_dir`` (scripted only): script files may be
    named inside it; without one, only inline scripts are accepted.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ProviderKind
    base_url: str | None = None
    api_key_env: str | None = None
    models: list[str] | None = None
    script_dir: Path | None = None


def _profile_error(message: str) -> ApplicationError:
    """A bad profile or model name: the run fails, retrying cannot help."""
    return ApplicationError(message, type=PROFILE_ERROR_TYPE, non_retryable=True)


class ModelProfiles(BaseModel):
    """The profiles an agent worker serves, by name."""

    model_config = ConfigDict(frozen=True)

    profiles: dict[str, ModelProfile] = Field(default_factory=dict)

    def __init__(self, profiles: Mapping[str, ModelProfile] | None = None) -> None:
        super().__init__(profiles=dict(profiles or {}))

    @classmethod
    def defaults(cls) -> ModelProfiles:
        """``openai``, ``anthropic`` (keys and base URLs from the worker's usual
        variables) and ``scripted`` (inline scripts only)."""
        return cls(
            {
                "openai": ModelProfile(kind="openai"),
                "anthropic": ModelProfile(kind="anthropic"),
                "scripted": ModelProfile(kind="scripted"),
            }
        )

    @classmethod
    def from_settings(cls, models: ModelSettings) -> ModelProfiles:
        """``FILEGATE_MODEL_PROFILES`` or ``..._FILE``; the defaults when neither is set.

        ValueError (one line, naming the setting) when the configuration is bad.
        """
        inline, file = models.env_name("profiles"), models.env_name("profiles_file")
        raw, origin = models.profiles, inline
        if models.profiles_file is not None:
            if raw is not None:
                raise ValueError(f"set {inline} or {file}, not both")
            origin = f"{file} {models.profiles_file}"
            try:
                raw = models.profiles_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"{origin}: {exc.strerror or exc}") from None
        if raw is None:
            return cls.defaults()
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object of profiles by name")
            return cls({name: ModelProfile.model_validate(p) for name, p in data.items()})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ValueError(f"{origin}: {problems}") from None
        except ValueError as exc:
            raise ValueError(f"{origin}: {exc}") from None

    def resolve(self, spec: ModelSpec) -> ModelProfile:
        """The profile ``spec`` names, after checking everything the input chose.

        Raises a non-retryable :data:`PROFILE_ERROR_TYPE` ApplicationError with
        one line: refused fields/options, unknown profile, model not allowed,
        script name outside the script directory.
        """
        try:
            check_model_spec(spec)
        except ValueError as exc:
            raise _profile_error(str(exc)) from None
        profile = self.profiles.get(spec.provider)
        if profile is None:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise _profile_error(
                f"unknown model profile {spec.provider!r} on this agent worker (known: {known})"
            )
        if profile.kind == "scripted":
            if spec.name:
                script_path(profile, spec.name)  # refuse early, before any file access
        elif profile.models is not None and spec.name not in profile.models:
            raise _profile_error(
                f"model {spec.name!r} is not allowed by model profile {spec.provider!r} "
                f"(allowed: {', '.join(profile.models) or 'none'})"
            )
        return profile


def script_path(profile: ModelProfile, name: str) -> Path:
    """The script file ``name`` inside the profile's script directory.

    Decided on the names alone (symlinks resolved, no existence check), so the
    answer for a name outside the directory never depends on what is there.
    """
    if profile.script_dir is None:
        raise _profile_error(
            "this agent worker's scripted model profile takes inline scripts only "
            "(options['script']); script file names need a script_dir in its profile"
        )
    root = profile.script_dir.resolve()
    candidate = Path(name)
    path = (root / candidate).resolve()
    if candidate.is_absolute() or ".." in candidate.parts or not path.is_relative_to(root):
        raise _profile_error(f"scripted model name {name!r} is outside the script directory")
    return path
