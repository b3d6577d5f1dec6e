"""Boundary validation the vendor backends share: profile sections and typed opaque configs.

Both turn pydantic's errors into the project's typed errors with the dotted field
path in front of each problem, so every vendor reports a bad profile or a bad
claim config the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from dra_driver.common.errors import ConfigError, ProfileError

ModelT = TypeVar("ModelT", bound=BaseModel)


def field_path(error: Mapping[str, Any], root: str) -> str:
    """A pydantic error location as `a.b.0.c`; `root` when the error is about the whole object."""
    return ".".join(str(part) for part in error.get("loc", ())) or root


def parse_profile_section(model: type[ModelT], section: Mapping[str, Any], key: str, title: str) -> ModelT:
    """Validate the `key:` section of a hardware profile; ProfileError lists every problem as `key.path: message`."""
    try:
        return model.model_validate(dict(section))
    except PydanticValidationError as exc:
        problems = "; ".join(f"{key}.{field_path(error, '(section)')}: {error['msg']}" for error in exc.errors())
        raise ProfileError(f"invalid {title}: {problems}") from exc


def validate_settingless_config(model: type[ModelT], parameters: Any, driver: str) -> ModelT:
    """A config whose only fields are apiVersion and kind (defaults: the model's own).

    Anything else is a ConfigError naming the field and the fix, so a typo or a
    config meant for another driver fails instead of being silently ignored.
    """
    api_version, kind = model.model_fields["apiVersion"].default, model.model_fields["kind"].default
    if not isinstance(parameters, Mapping):
        raise ConfigError(
            f"{driver} opaque parameters must be an object with apiVersion {api_version!r} and kind {kind!r}, "
            f"not {type(parameters).__name__}"
        )
    try:
        return model.model_validate(dict(parameters))
    except PydanticValidationError as exc:
        problems = "; ".join(_config_problem(error, api_version, kind) for error in exc.errors())
        raise ConfigError(f"invalid {driver} configuration: {problems}") from exc


def _config_problem(error: Mapping[str, Any], api_version: str, kind: str) -> str:
    field = field_path(error, "(parameters)")
    if error.get("type") == "extra_forbidden":
        return f"{field}: unknown field; {kind} has no settings besides apiVersion and kind, remove it"
    if field in ("apiVersion", "kind"):
        expected = api_version if field == "apiVersion" else kind
        return f"{field}: {error.get('input')!r} is not supported; use {expected!r}"
    return f"{field}: {error.get('msg')}"
