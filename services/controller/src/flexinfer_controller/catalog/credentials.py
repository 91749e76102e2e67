"""Registry credentials from a Kubernetes dockerconfigjson secret (``.dockerconfigjson``).

The document is ``{"auths": {"<registry>": {...}}}`` where each entry holds ``auth``
(base64 ``user:password``) or ``username``/``password``, and optionally ``identitytoken``
(an OAuth2 refresh token for the registry's token service) or ``registrytoken`` (a bearer
token sent as is). Keys may be ``host``, ``host:port``, ``https://host`` or ``https://host/v1/``.
ECR users store ``AWS`` and the output of ``aws ecr get-login-password`` as user/password.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flexinfer_common.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RegistryCredentials:
    """What one ``auths`` entry grants; secrets are kept out of ``repr``."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    identity_token: str | None = field(default=None, repr=False)
    registry_token: str | None = field(default=None, repr=False)

    @property
    def basic(self) -> tuple[str, str] | None:
        """``(username, password)`` when both are set."""
        if self.username and self.password is not None:
            return self.username, self.password
        return None


@dataclass(frozen=True, slots=True)
class DockerConfig:
    """Credentials by registry host (``host[:port]``, lowercase)."""

    auths: Mapping[str, RegistryCredentials] = field(default_factory=dict)

    def for_registry(self, registry: str) -> RegistryCredentials | None:
        """The credentials stored for ``registry`` (``host[:port]``), if any."""
        return self.auths.get(registry.lower())


def parse_dockerconfigjson(data: bytes | str | Mapping[str, Any]) -> DockerConfig:
    """Parse a dockerconfigjson document; ConfigError (naming no secret) when malformed."""
    doc = _load(data)
    auths = doc.get("auths")
    if not isinstance(auths, Mapping):
        raise ConfigError("dockerconfigjson has no 'auths' object")
    parsed: dict[str, RegistryCredentials] = {}
    for key, entry in auths.items():
        if not isinstance(key, str) or not isinstance(entry, Mapping):
            raise ConfigError("dockerconfigjson 'auths' must map registry names to objects")
        parsed[registry_key(key)] = _entry(key, entry)
    return DockerConfig(parsed)


def registry_key(key: str) -> str:
    """``host[:port]`` of an ``auths`` key: scheme and path dropped, lowercase."""
    _, sep, rest = key.partition("://")
    host = (rest if sep else key).split("/", 1)[0]
    return host.lower()


def _load(data: bytes | str | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(data, Mapping):
        return data
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError("dockerconfigjson is not valid JSON") from exc
    if not isinstance(doc, dict):
        raise ConfigError("dockerconfigjson must be a JSON object")
    return doc


def _entry(key: str, entry: Mapping[str, Any]) -> RegistryCredentials:
    values = {name: entry.get(name) for name in _FIELDS}
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"dockerconfigjson entry {key!r}: {name!r} must be a string")
    username, password = values["username"], values["password"]
    if values["auth"]:
        username, password = _decode_auth(key, values["auth"])
    return RegistryCredentials(
        username=username or None,
        password=password,
        identity_token=values["identitytoken"] or None,
        registry_token=values["registrytoken"] or None,
    )


_FIELDS = ("auth", "username", "password", "identitytoken", "registrytoken")


def _decode_auth(key: str, auth: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(auth, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        # The value is a secret: say where it is broken, never what it holds.
        raise ConfigError(f"dockerconfigjson entry {key!r}: 'auth' is not base64") from exc
    username, sep, password = decoded.partition(":")
    if not sep:
        raise ConfigError(f"dockerconfigjson entry {key!r}: 'auth' is not user:password")
    return username, password
