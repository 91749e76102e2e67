"""One readable line for settings that failed validation, naming the environment variable.

pydantic reports a field (``auth_tokens``) and a location inside it; a user set
``FLEXINFER_PROXY_AUTH_TOKENS``. The settings class is found from the error's title (its
class name), and from it the variable: the field's env alias when it has one, else the
class's ``env_prefix`` and the field's name. The value given is never repeated: it may be
a secret.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic_settings import BaseSettings


def describe_settings_error(exc: ValidationError, env: Mapping[str, str] | None = None) -> str:
    """``invalid setting NAME: problem`` for the first error in ``exc`` (never the value)."""
    env = os.environ if env is None else env
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    field = ".".join(str(part) for part in loc) or exc.title
    names = _env_names(_settings_class(exc.title, loc), loc)
    given = _given(names, env)
    if given is not None:
        where = given
    elif names:
        where = f"{field} ({names[0]})"
    else:
        where = field
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid setting {where}: {_problem(first)}{more}"


def _problem(error: Any) -> str:
    """The error's message; a validator's own ValueError without pydantic's prefix."""
    cause = (error.get("ctx") or {}).get("error")
    if error["type"] == "value_error" and cause is not None:
        return str(cause)
    return str(error["msg"])


def _settings_class(title: str, loc: Sequence[Any]) -> type[BaseSettings] | None:
    """The settings class a ValidationError came from (pydantic titles it by class name)."""
    candidates = [c for c in _subclasses(BaseSettings) if c.__name__ == title]
    if loc:
        candidates = [c for c in candidates if str(loc[0]) in c.model_fields] or candidates
    return candidates[0] if candidates else None


def _subclasses(cls: type[BaseSettings]) -> Iterator[type[BaseSettings]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _env_names(cls: type[BaseModel] | None, loc: Sequence[Any]) -> list[str]:
    """The environment variables that set the field at ``loc`` (preferred first)."""
    if cls is None or not loc or str(loc[0]) not in cls.model_fields:
        return []
    name = str(loc[0])
    info = cls.model_fields[name]
    nested = info.annotation
    if len(loc) > 1 and isinstance(nested, type) and issubclass(nested, BaseSettings):
        return _env_names(nested, loc[1:])  # a settings group has its own prefix
    alias = info.validation_alias
    if isinstance(alias, str):
        return [alias.upper()]
    if isinstance(alias, AliasChoices):
        choices = [c for c in alias.choices if isinstance(c, str)]
        # populate_by_name lists the field's own name among them: only variables matter.
        named = [c for c in choices if c.isupper()]
        if named:
            return named
    prefix = str(cls.model_config.get("env_prefix", "")) if issubclass(cls, BaseSettings) else ""
    return [f"{prefix}{name}".upper()]


def _given(names: list[str], env: Mapping[str, str]) -> str | None:
    """The one of ``names`` set in ``env`` (pydantic-settings matches case-insensitively)."""
    present = {key.upper() for key in env}
    return next((name for name in names if name in present), None)
