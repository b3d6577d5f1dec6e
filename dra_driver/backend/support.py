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


def config_model(parameters: Any, models: Mapping[str, type[ModelT]], api_version: str, driver: str) -> type[ModelT]:
    """The model (by `kind`) a vendor's opaque parameters name, after their envelope is checked: an object
    whose apiVersion is `api_version` and whose kind is one of `models`. An envelope field that is absent
    takes the model's default where it has one (a settingless config may be `{}`); anything else is a
    ConfigError naming the field and what to use. The one envelope check of every vendor's config."""
    kinds = ", ".join(repr(kind) for kind in models)
    if not isinstance(parameters, Mapping):
        raise ConfigError(
            f"{driver} opaque parameters must be an object with apiVersion {api_version!r} and kind {kinds}, "
            f"not {type(parameters).__name__}"
        )
    only = next(iter(models.values())) if len(models) == 1 else None  # whose defaults an absent field takes
    if parameters.get("apiVersion", only.model_fields["apiVersion"].default if only else None) != api_version:
        raise ConfigError(f"invalid {driver} configuration: apiVersion: {parameters.get('apiVersion')!r} is not supported; use {api_version!r}")
    kind = parameters.get("kind", only.model_fields["kind"].default if only else None)
    model = models.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ConfigError(f"invalid {driver} configuration: kind: {kind!r} is not supported; use {'one of ' if len(models) > 1 else ''}{kinds}")
    return model


def validate_settingless_config(model: type[ModelT], parameters: Any, driver: str) -> ModelT:
    """A config whose only fields are apiVersion and kind (defaults: the model's own).

    Anything else is a ConfigError naming the field and the fix, so a typo or a
    config meant for another driver fails instead of being silently ignored.
    """
    api_version, kind = model.model_fields["apiVersion"].default, model.model_fields["kind"].default
    config_model(parameters, {kind: model}, api_version, driver)
    try:
        return model.model_validate(dict(parameters))
    except PydanticValidationError as exc:
        problems = "; ".join(_config_problem(error, kind) for error in exc.errors())
        raise ConfigError(f"invalid {driver} configuration: {problems}") from exc


def _config_problem(error: Mapping[str, Any], kind: str) -> str:
    field = field_path(error, "(parameters)")
    if error.get("type") == "extra_forbidden":
        return f"{field}: unknown field; {kind} has no settings besides apiVersion and kind, remove it"
    return f"{field}: {error.get('msg')}"
