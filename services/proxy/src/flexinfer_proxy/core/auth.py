"""Bearer-token auth: tokens compared in constant time, optionally scoped to models/tenants.

A token file is JSON: a list of ``{"token": "...", "name": "ci", "models": ["llama"],
"tenants": ["team-a"]}``. ``models`` holds Model names or served names; ``tenants`` match a
Model's ``flexinfer.ai/tenant`` label or annotation. A grant with neither is unscoped.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flexinfer_common.api import Model
from flexinfer_common.errors import ConfigError, FlexInferError

TENANT_KEY = "flexinfer.ai/tenant"


class AuthError(FlexInferError):
    """401: no valid bearer token."""

    code = "invalid_api_key"


class ForbiddenError(FlexInferError):
    """403: the token is valid but not for this model."""

    code = "model_not_permitted"


class TokenGrant(BaseModel):
    """One accepted token and what it may reach."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str = Field(min_length=8, max_length=4096)
    name: str = "token"
    models: frozenset[str] | None = None
    tenants: frozenset[str] | None = None

    def allows(self, model: Model) -> bool:
        """Whether this grant reaches ``model``."""
        if self.models is None and self.tenants is None:
            return True
        if self.models is not None and (
            model.metadata.name in self.models or any(n in self.models for n in model.served_names)
        ):
            return True
        return self.tenants is not None and tenant_of(model) in self.tenants


def tenant_of(model: Model) -> str:
    """A Model's tenant: its ``flexinfer.ai/tenant`` label/annotation, else its namespace."""
    meta = model.metadata
    return meta.labels.get(TENANT_KEY) or meta.annotations.get(TENANT_KEY) or meta.namespace


def load_token_file(path: Path) -> list[TokenGrant]:
    """Grants from a JSON token file; ConfigError when unreadable or malformed."""
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, list):
            raise ConfigError(f"{path}: expected a JSON list of token grants")
        return [TokenGrant.model_validate(item) for item in raw]
    except (OSError, ValueError, ValidationError) as exc:
        raise ConfigError(f"cannot load token file {path}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: bytes
    grant: TokenGrant


class Authenticator:
    """Checks ``Authorization: Bearer <token>`` against the configured grants."""

    def __init__(self, grants: list[TokenGrant]) -> None:
        # Compare SHA-256 digests: equal lengths, so compare_digest takes the same time for
        # every candidate and a near-miss token teaches an attacker nothing.
        self._entries = [_Entry(_sha(g.token.encode()), g) for g in grants]

    @property
    def enabled(self) -> bool:
        """True when any token is configured (otherwise every request is let through)."""
        return bool(self._entries)

    def authenticate(self, authorization: bytes | None) -> TokenGrant | None:
        """The grant for the header value; AuthError when missing or wrong."""
        if not self._entries:
            return None
        if authorization is None:
            raise AuthError("You didn't provide an API key (Authorization: Bearer <token>)")
        scheme, _, token = authorization.partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token or len(token) > 4096:
            raise AuthError("Malformed Authorization header: expected 'Bearer <token>'")
        digest = _sha(token)
        found: TokenGrant | None = None
        for entry in self._entries:  # no early exit: time does not depend on which matched
            if hmac.compare_digest(digest, entry.digest) and found is None:
                found = entry.grant
        if found is None:
            raise AuthError("Incorrect API key provided")
        return found

    @staticmethod
    def authorize(grant: TokenGrant | None, model: Model) -> None:
        """ForbiddenError when ``grant`` may not use ``model``."""
        if grant is not None and not grant.allows(model):
            raise ForbiddenError(f"this API key may not use the model '{model.metadata.name}'")


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()
