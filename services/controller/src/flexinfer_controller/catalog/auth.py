"""Authorization for one registry: Basic, or bearer tokens from its token service.

The flow is the distribution token spec's: a request answered 401 with
``WWW-Authenticate: Bearer realm="...",service="...",scope="..."`` is retried with a token
from ``GET realm?service=...&scope=...`` (Basic credentials from the secret, or none for
anonymous pulls); with an identity token the realm is asked by OAuth2 ``POST``
(``grant_type=refresh_token``). Tokens are cached per scope until ``expires_in`` (60 s when
absent, as the spec says) runs out. A ``Basic`` challenge is answered with the secret's
user and password, which are then sent up front on every later request.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx

from flexinfer_controller.catalog.credentials import RegistryCredentials
from flexinfer_controller.catalog.errors import RegistryAuthError
from flexinfer_controller.catalog.reference import RegistryLocation
from flexinfer_controller.catalog.responses import (
    check_response,
    json_body,
    read_limited,
    transport_error,
)

DEFAULT_TOKEN_LIFETIME_S = 60.0
REFRESH_EARLY = 0.9  # refresh at 90% of a token's life: a request in flight must not outlive it
CLIENT_ID = "flexinfer-controller"
_TOKEN_LIMIT = 1 << 20
_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*,?')


@dataclass(frozen=True, slots=True)
class Challenge:
    """One ``WWW-Authenticate`` challenge: its scheme (lowercase) and parameters."""

    scheme: str
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def realm(self) -> str:
        """The token service URL (Bearer) or protection space (Basic)."""
        return self.params.get("realm", "")


def parse_challenge(header: str) -> Challenge | None:
    """Parse ``Scheme k="v",k2=v2``; quoted values may hold commas (``pull,push``)."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params: dict[str, str] = {}
    for match in _PARAM.finditer(rest):
        value = match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[match.group(1).lower()] = value
    return Challenge(scheme.lower(), params)


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    expires_at: float


def basic_header(credentials: RegistryCredentials) -> str | None:
    """``Basic base64(user:password)``, when the credentials hold both."""
    pair = credentials.basic
    if pair is None:
        return None
    return "Basic " + base64.b64encode(f"{pair[0]}:{pair[1]}".encode()).decode("ascii")


class RegistryAuth:
    """Authorization headers for one registry; tokens cached per scope (state per instance)."""

    def __init__(
        self,
        location: RegistryLocation,
        credentials: RegistryCredentials | None,
        http: httpx.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        challenge: Challenge | None = None,
        basic_first: bool = False,
    ) -> None:
        self._location = location
        self._credentials = credentials or RegistryCredentials()
        self._http = http
        self._clock = clock
        self._challenge = challenge  # the token service, once seen (or known, as for GHCR)
        self._basic = basic_header(self._credentials) if basic_first else None
        self._tokens: dict[str, _Token] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def header(self, scope: str) -> str | None:
        """The Authorization header for a request needing ``scope`` (None: try without)."""
        if self._credentials.registry_token:
            return f"Bearer {self._credentials.registry_token}"
        if self._basic is not None:
            return self._basic
        token = self._tokens.get(scope)
        if token is not None and token.expires_at > self._clock():
            return f"Bearer {token.value}"
        if self._challenge is not None:
            return await self._bearer(scope, self._challenge, stale=None)
        return None

    async def answer(self, response: httpx.Response, scope: str, sent: str | None) -> str:
        """The header to retry a 401 with; RegistryAuthError when there is none to try."""
        registry = self._location.registry
        challenges = [parse_challenge(h) for h in response.headers.get_list("www-authenticate")]
        known = {c.scheme: c for c in challenges if c is not None}
        if "bearer" in known and not self._credentials.registry_token:
            self._challenge = known["bearer"]
            return await self._bearer(scope, known["bearer"], stale=sent)
        if "basic" in known:
            basic = basic_header(self._credentials)
            if basic is None:
                raise RegistryAuthError(registry, "the registry asks for Basic credentials")
            if sent == basic:
                raise RegistryAuthError(registry, "the registry refused the Basic credentials")
            self._basic = basic
            return basic
        schemes = ", ".join(sorted(known)) or "no challenge"
        raise RegistryAuthError(registry, f"HTTP 401 with {schemes} (no way to authenticate)")

    async def _bearer(self, scope: str, challenge: Challenge, stale: str | None) -> str:
        lock = self._locks.setdefault(scope, asyncio.Lock())
        async with lock:
            # Concurrent requests that met the same 401 share one token request.
            token = self._tokens.get(scope)
            fresh = token is not None and token.expires_at > self._clock()
            if token is not None and fresh and stale != f"Bearer {token.value}":
                return f"Bearer {token.value}"
            self._tokens.pop(scope, None)
            token = await self._fetch(scope, challenge)
            self._tokens[scope] = token
            return f"Bearer {token.value}"

    async def _fetch(self, scope: str, challenge: Challenge) -> _Token:
        realm = self._checked_realm(challenge.realm)
        scopes = [s for s in dict.fromkeys([scope, challenge.params.get("scope", "")]) if s]
        service = challenge.params.get("service")
        started = self._clock()
        if self._credentials.identity_token:
            response, body = await self._oauth(realm, service, scopes)
        else:
            response, body = await self._token_get(realm, service, scopes)
        return self._token_from(response, body, started)

    def _checked_realm(self, realm: str) -> str:
        url = httpx.URL(realm) if realm else None
        registry = self._location.registry
        if url is None or url.scheme not in ("http", "https") or not url.host:
            raise RegistryAuthError(registry, f"token realm {realm!r} is not an http(s) URL")
        if url.scheme == "http" and self._location.scheme == "https":
            # Credentials sent to a plain-HTTP realm would cross the network in the clear.
            raise RegistryAuthError(registry, f"token realm {realm!r} downgrades HTTPS to HTTP")
        return realm

    async def _token_get(
        self, realm: str, service: str | None, scopes: list[str]
    ) -> tuple[httpx.Response, bytes]:
        params: list[tuple[str, str | int | float | bool | None]] = (
            [("service", service)] if service else []
        )
        params += [("scope", s) for s in scopes]
        headers: dict[str, str] = {}
        basic = basic_header(self._credentials)
        if basic is not None:
            headers["Authorization"] = basic
            params.append(("account", self._credentials.username or ""))
        request = self._http.build_request("GET", realm, params=params, headers=headers)
        return await self._send(request)

    async def _oauth(
        self, realm: str, service: str | None, scopes: list[str]
    ) -> tuple[httpx.Response, bytes]:
        form = {
            "grant_type": "refresh_token",
            "refresh_token": self._credentials.identity_token or "",
            "client_id": CLIENT_ID,
            "service": service or "",
            "scope": " ".join(scopes),
        }
        response, body = await self._send(self._http.build_request("POST", realm, data=form))
        if response.status_code in (404, 405):
            # The OAuth2 spec lets a token server offer GET only: fall back, as Docker does.
            return await self._token_get(realm, service, scopes)
        return response, body

    async def _send(self, request: httpx.Request) -> tuple[httpx.Response, bytes]:
        what = f"token service {request.url.copy_with(query=None)}"
        try:
            response = await self._http.send(request, stream=True)
            try:
                body = await read_limited(response, _TOKEN_LIMIT, self._location.registry, what)
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            raise transport_error(self._location.registry, what, exc) from exc
        return response, body

    def _token_from(self, response: httpx.Response, body: bytes, started: float) -> _Token:
        registry = self._location.registry
        check_response(response, registry, "token service", body)
        doc = json_body(body, registry, "token service")
        value = doc.get("token") or doc.get("access_token")
        if not isinstance(value, str) or not value:
            raise RegistryAuthError(registry, "the token service answered no token")
        lifetime = doc.get("expires_in")
        if not isinstance(lifetime, int | float) or isinstance(lifetime, bool) or lifetime <= 0:
            lifetime = DEFAULT_TOKEN_LIFETIME_S
        return _Token(value, started + float(lifetime) * REFRESH_EARLY)
