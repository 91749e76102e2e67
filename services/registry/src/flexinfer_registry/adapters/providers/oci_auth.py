"""Talking to one OCI registry: http or https, its errors, and its authorization flow.

Every request goes out anonymously first. A 401 carrying ``WWW-Authenticate: Bearer
realm=…,service=…,scope=…`` is answered by asking the realm for a token (with the
registry's Basic credentials when the auth file has some, anonymously otherwise) and
sending the request again with it; a ``Basic`` challenge is answered with the credentials
themselves. Credentials are read from a docker ``config.json`` (a mounted
``.dockerconfigjson`` secret) by registry host, so they only ever go to the registry they
were stored for and to the token realm it names, and never into a message or a log line.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from flexinfer_common.errors import NotFoundError
from flexinfer_registry.adapters.providers.http import translate_transport
from flexinfer_registry.core.providers.base import (
    AccessDeniedError,
    SourceNotAllowedError,
    SourceUnreachableError,
)

_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*,?')
_MAX_ERROR_BODY = 4096
_MAX_TOKEN_BODY = 1 << 20
INSECURE_SETTING = "FLEXINFER_REGISTRY_OCI_INSECURE_REGISTRIES"
AUTH_SETTING = "FLEXINFER_REGISTRY_OCI_AUTH_FILE"


@dataclass(frozen=True)
class BasicCredentials:
    """A user and password for one registry; the password stays out of ``repr``."""

    username: str
    password: str = field(repr=False)

    def header(self) -> str:
        """``Basic base64(user:password)``."""
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")


def read_credentials(auth_file: Path | None, host: str) -> BasicCredentials | None:
    """The credentials ``auth_file`` (docker config.json) stores for ``host``, if any."""
    if auth_file is None:
        return None
    try:
        doc = json.loads(auth_file.read_bytes())
        auths = doc["auths"]
        entries = {_host_of(str(k)): v for k, v in auths.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        # Name the file and the problem's kind, never its content: it holds secrets.
        raise AccessDeniedError(
            f"cannot read OCI credentials from {auth_file} ({type(exc).__name__}); "
            f"{AUTH_SETTING} must name a docker config.json with an 'auths' object"
        ) from None
    entry = entries.get(host)
    if not isinstance(entry, Mapping):
        return None
    username, password = entry.get("username"), entry.get("password")
    if isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise AccessDeniedError(f"{auth_file}: the 'auth' of {host} is not base64") from None
    if isinstance(username, str) and username and isinstance(password, str):
        return BasicCredentials(username, password)
    return None


def _host_of(key: str) -> str:
    """``host[:port]`` of an ``auths`` key (``https://host/v1/`` is docker's old form)."""
    _, sep, rest = key.partition("://")
    return (rest if sep else key).split("/", 1)[0].lower()


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Scheme k="v",k2=v2`` -> (lowercase scheme, params); quoted values may hold commas."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    for match in _PARAM.finditer(rest):
        value = match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[match.group(1).lower()] = value
    return scheme.lower(), params


def is_insecure(host: str, insecure: frozenset[str]) -> bool:
    """Whether ``host[:port]`` is listed (as itself, or by its bare host for any port)."""
    bare = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return host in insecure or bare in insecure


async def _read_limited(response: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of the body: a hostile answer cannot fill memory."""
    data = bytearray()
    async for block in response.aiter_bytes():
        data += block
        if len(data) > limit:
            break
    return bytes(data[:limit])


async def raise_for(response: httpx.Response, what: str) -> None:
    """401/403 -> AccessDeniedError, 404 -> NotFoundError, other errors -> unreachable."""
    status = response.status_code
    if status < 400:
        return
    body = await _read_limited(response, _MAX_ERROR_BODY)
    await response.aclose()
    detail = f"{what}: HTTP {status}{_registry_message(body)}"
    if status in (401, 403):
        raise AccessDeniedError(f"{detail} (check the registry's credentials in {AUTH_SETTING})")
    if status == 404:
        raise NotFoundError(detail)
    retry = response.headers.get("retry-after", "")
    raise SourceUnreachableError(detail, delay=float(retry) if retry.isdigit() else 5.0)


def _registry_message(body: bytes) -> str:
    """``: CODE message`` from a distribution error body, when it is one."""
    try:
        first = json.loads(body)["errors"][0]
        return f": {str(first.get('code', ''))[:40]} {str(first.get('message', ''))[:200]}"
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""


class OciSession:
    """Requests to one registry for one repository, authorizing as its challenges ask."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        host: str,
        repository: str,
        *,
        insecure: frozenset[str],
        credentials: BasicCredentials | None,
    ) -> None:
        self._client = client
        self._repository = repository
        self._insecure = insecure
        self._credentials = credentials
        self._authorization: str | None = None
        scheme = "http" if is_insecure(host, insecure) else "https"
        self.base = f"{scheme}://{host}/v2/{repository}"

    async def get(
        self, path: str, what: str, headers: Mapping[str, str] | None = None
    ) -> httpx.Response:
        """A streamed GET of ``base/path``, authorized; errors raised, the body unread."""
        for attempt in range(2):
            sent = dict(headers or {})
            if self._authorization:
                sent["Authorization"] = self._authorization
            request = self._client.build_request("GET", f"{self.base}/{path}", headers=sent)
            with translate_transport(what):
                response = await self._client.send(request, stream=True)
            if response.status_code == 401 and attempt == 0:
                challenge = response.headers.get("www-authenticate", "")
                await response.aclose()
                await self._authorize(challenge, what)
                continue
            try:
                await raise_for(response, what)
            except BaseException:
                await response.aclose()
                raise
            return response
        raise AssertionError("unreachable")  # the second attempt always returns or raises

    async def _authorize(self, header: str, what: str) -> None:
        """Answer a challenge: a token from the realm (Bearer) or the credentials (Basic)."""
        scheme, params = parse_challenge(header)
        if scheme == "basic" and self._credentials is not None:
            self._authorization = self._credentials.header()
        elif scheme == "bearer" and params.get("realm"):
            self._authorization = f"Bearer {await self._token(params, what)}"
        else:
            needs = "credentials" if scheme == "basic" else "a supported challenge"
            raise AccessDeniedError(
                f"{what}: HTTP 401 without {needs} (add the registry to {AUTH_SETTING})"
            )

    async def _token(self, params: Mapping[str, str], what: str) -> str:
        """A token from the realm for the challenge's service and scope."""
        realm = params["realm"]
        parts = urlsplit(realm)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise AccessDeniedError(f"{what}: token realm {realm[:120]!r} is not an http(s) URL")
        if parts.scheme == "http" and not is_insecure(parts.netloc.lower(), self._insecure):
            raise SourceNotAllowedError(
                f"{what}: token realm {realm[:120]} is plain http; list {parts.netloc} in "
                f"{INSECURE_SETTING} to allow it"
            )
        query = {"scope": params.get("scope") or f"repository:{self._repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        headers = {"Authorization": self._credentials.header()} if self._credentials else {}
        token_what = f"{what}: token from {parts.netloc}"
        request = self._client.build_request("GET", realm, params=query, headers=headers)
        with translate_transport(token_what):
            response = await self._client.send(request, stream=True)
        try:
            await raise_for(response, token_what)
            body = await _read_limited(response, _MAX_TOKEN_BODY)
        finally:
            await response.aclose()
        try:
            doc = json.loads(body)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise AccessDeniedError(f"{token_what}: the answer holds no token")
        return token
