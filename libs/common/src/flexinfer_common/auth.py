"""Admin-scope bearer tokens for a service's HTTP API: settings, the check, an ASGI guard.

The admin scope is separate from the proxy's client tokens: a client token never opens an
admin API. A service's settings inherit ``AdminAuthSettings``, so the fields take that
service's prefix (``FLEXINFER_CONTROLLER_AUTH_TOKEN``, like the registry's
``FLEXINFER_REGISTRY_AUTH_TOKEN``). Deny by default: a service that would listen beyond
loopback with no token refuses to start unless told ``ALLOW_UNAUTHENTICATED``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.types import ASGIApp, Receive, Scope, Send

from flexinfer_common.errors import ConfigError, FlexInferError
from flexinfer_common.settings import TelemetrySettings
from flexinfer_common.telemetry import METRICS_PATH, SD_ENGINES_PATH
from flexinfer_common.web import add_error_schema, openai_error

log = logging.getLogger(__name__)

HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
"""Always open: the kubelet's probes carry no token."""

_TOKEN = re.compile(r"[\x21-\x7e]{16,4096}")
_SCHEME = "adminToken"


class AdminAuthSettings(BaseSettings):
    """Admin-token fields a service's settings inherit (with that service's env prefix)."""

    model_config = SettingsConfigDict(extra="ignore")

    auth_token: SecretStr | None = None
    """Admin bearer token. When set (here or in ``auth_token_file``) every route except
    /healthz and /readyz needs ``Authorization: Bearer <token>``; 16 to 4096 printable
    ASCII characters, so a guessable ``admin`` is refused at start."""

    auth_token_file: Path | None = None
    """File of admin tokens, one per line (a mounted Secret, or the token ``flexinfer up``
    generates). Several lines let a token be rotated without downtime; ``#`` starts a
    comment. Read once at start."""

    allow_unauthenticated: bool = False
    """Serve without an admin token on a non-loopback address. Off, such a service refuses
    to start: an open admin API on a network is never what anyone meant."""


class AuthenticationError(FlexInferError):
    """401: the request carries no valid admin token."""

    def __init__(self, message: str, *, challenge: str = "Bearer") -> None:
        super().__init__(message)
        self.challenge = challenge
        """The ``WWW-Authenticate`` value to answer with (RFC 6750)."""


class AdminTokens:
    """Accepted admin tokens, kept only as SHA-256 digests and compared in constant time."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._digests = tuple(_sha(token.encode("ascii")) for token in tokens)
        if not self._digests:
            raise ConfigError("an admin token list must not be empty")

    def __repr__(self) -> str:
        return f"AdminTokens({len(self._digests)} token(s))"

    def overlaps(self, other: AdminTokens) -> bool:
        """Whether a token is in both lists: a start-up check that two scopes' tokens
        differ (a shared token would hold both scopes), so not constant time."""
        return not set(self._digests).isdisjoint(other._digests)

    def check(self, authorization: bytes | None) -> None:
        """Pass a valid ``Bearer <token>`` header value; AuthenticationError otherwise."""
        if authorization is None:
            raise AuthenticationError("an admin token is needed: Authorization: Bearer <token>")
        scheme, _, token = authorization.partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token or len(token) > 4096:
            raise AuthenticationError(
                "malformed Authorization header: expected 'Bearer <token>'",
                challenge='Bearer error="invalid_request"',
            )
        # Digests have one length, so compare_digest's time is the same for every candidate;
        # and every candidate is compared, so the time does not say which one matched.
        digest = _sha(token)
        matched = False
        for expected in self._digests:
            matched |= hmac.compare_digest(digest, expected)
        if not matched:
            raise AuthenticationError(
                "invalid admin token", challenge='Bearer error="invalid_token"'
            )


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def load_admin_tokens(
    token: SecretStr | None, token_file: Path | None, *, kind: str = "admin"
) -> AdminTokens | None:
    """The configured tokens (the setting and the file's lines), None when there are none;
    ``kind`` names them in errors (``admin``, ``P2P``)."""
    values = [token.get_secret_value()] if token is not None else []
    if token_file is not None:
        values += read_token_file(token_file, kind=kind)
    for number, value in enumerate(values, 1):
        if not _TOKEN.fullmatch(value):
            # Never echo the value: a near-miss token in a log is still a leaked token.
            raise ConfigError(
                f"{kind} token #{number} is not 16-4096 printable ASCII characters without spaces"
            )
    return AdminTokens(values) if values else None


def read_token_file(path: Path, *, kind: str = "admin") -> list[str]:
    """Tokens in ``path``, one per line; blank lines and ``#`` comments skipped."""
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the {kind} token file {path}: {exc}") from exc
    if mode & 0o004:
        log.warning("%s token file %s is readable by every user: chmod o-r it", kind, path)
    tokens = [line.strip() for line in text.splitlines()]
    tokens = [t for t in tokens if t and not t.startswith("#")]
    if not tokens:
        raise ConfigError(f"the {kind} token file {path} holds no token")
    return tokens


def bearer_token(token: SecretStr | None, token_file: Path | None, *, kind: str) -> str | None:
    """The one token a client sends: the setting, else the file's first token (a mounted
    Secret); None when neither is set. Read at start, like the servers' token files."""
    if token is not None:
        return token.get_secret_value()
    if token_file is None:
        return None
    return read_token_file(token_file, kind=kind)[0]


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps the port on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_admin_tokens(
    settings: AdminAuthSettings, *, host: str, telemetry: TelemetrySettings
) -> AdminTokens | None:
    """The service's admin tokens, applying deny by default; ConfigError says what to set."""
    tokens = load_admin_tokens(settings.auth_token, settings.auth_token_file)
    if tokens is not None:
        return tokens
    prefix = str(type(settings).model_config.get("env_prefix", ""))
    wanted = f"set {prefix}AUTH_TOKEN or {prefix}AUTH_TOKEN_FILE"
    if telemetry.metrics_enabled and telemetry.metrics_auth:
        raise ConfigError(f"FLEXINFER_TELEMETRY_METRICS_AUTH is on but no admin token: {wanted}")
    if not is_loopback(host) and not settings.allow_unauthenticated:
        raise ConfigError(
            f"refusing to serve an unauthenticated API on {host}: {wanted}, or "
            f"{prefix}ALLOW_UNAUTHENTICATED=true to accept that risk"
        )
    return None


def open_paths(telemetry: TelemetrySettings) -> frozenset[str]:
    """Paths that need no token: the health probes, and /metrics and the engines' service
    discovery (what Prometheus reads) unless METRICS_AUTH is on."""
    if telemetry.metrics_auth:
        return HEALTH_PATHS
    return HEALTH_PATHS | {METRICS_PATH, SD_ENGINES_PATH}


def install_admin_auth(
    app: FastAPI,
    settings: AdminAuthSettings,
    *,
    host: str,
    telemetry: TelemetrySettings,
) -> AdminTokens | None:
    """Require the admin token on every route except ``open_paths`` (when one is configured).

    Call it before ``setup_telemetry``, so that refused requests are counted in /metrics.
    """
    tokens = resolve_admin_tokens(settings, host=host, telemetry=telemetry)
    if tokens is not None:
        unguarded = open_paths(telemetry)
        guard_paths(app, tokens, lambda path: path not in unguarded)
    return tokens


def guard_paths(app: FastAPI, tokens: AdminTokens, guarded: Callable[[str], bool]) -> None:
    """Require ``tokens`` on the paths where ``guarded(path)``, and say so in the OpenAPI.

    The proxy, whose other routes take client tokens, guards only /metrics with it:
    ``guard_paths(app, tokens, lambda path: path == METRICS_PATH)``.
    """
    app.add_middleware(AdminAuthMiddleware, tokens=tokens, guarded=guarded)
    _document(app, guarded)


class AdminAuthMiddleware:
    """Pure ASGI guard: a guarded path without a valid admin token gets 401 before routing."""

    def __init__(
        self, app: ASGIApp, *, tokens: AdminTokens, guarded: Callable[[str], bool]
    ) -> None:
        self.app = app
        self._tokens = tokens
        self._guarded = guarded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass authorised (and unguarded) requests on; answer the rest 401."""
        if scope["type"] not in ("http", "websocket") or not self._guarded(scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            self._tokens.check(authorization(scope["headers"]))
        except AuthenticationError as exc:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            headers = {"WWW-Authenticate": exc.challenge}
            response = openai_error(401, str(exc), code="unauthorized", headers=headers)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def authorization(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The request's one Authorization value (what ``AdminTokens.check`` takes)."""
    values = [value for key, value in headers if key.lower() == b"authorization"]
    if len(values) > 1:
        # Two Authorization headers: which one a peer honours is ambiguous, so neither is.
        return b"ambiguous"
    return values[0] if values else None


def _document(app: FastAPI, guarded: Callable[[str], bool]) -> None:
    """Add the bearer scheme, and a 401 ErrorBody answer, to every guarded operation."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        components = schema.setdefault("components", {})
        if _SCHEME not in components.get("securitySchemes", {}):
            _add_security(schema, components, guarded)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_security(
    schema: dict[str, Any], components: dict[str, Any], guarded: Callable[[str], bool]
) -> None:
    components.setdefault("securitySchemes", {})[_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "the service's admin token (FLEXINFER_<SERVICE>_AUTH_TOKEN)",
    }
    unauthorized = {
        "description": "no valid admin token",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        "content": add_error_schema(schema),
    }
    for path, operations in schema.get("paths", {}).items():
        if not guarded(path):
            continue
        for operation in _operations(operations):
            operation["security"] = [{_SCHEME: []}]
            operation.setdefault("responses", {})["401"] = unauthorized


def _operations(item: dict[str, Any]) -> Collection[dict[str, Any]]:
    methods = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
    return [item[method] for method in methods if method in item]
