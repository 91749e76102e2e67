"""An OCI distribution API client over httpx: ping, catalog, tags, manifests.

Every foreign error is mapped at this boundary (see ``responses``). Paginated lists follow
the ``Link: <...>; rel="next"`` header, but only to the registry's own origin, because
the request carries its credentials.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from flexinfer_common.errors import NotFoundError
from flexinfer_controller.catalog.auth import Challenge, RegistryAuth, basic_header
from flexinfer_controller.catalog.credentials import RegistryCredentials
from flexinfer_controller.catalog.errors import RegistryProtocolError
from flexinfer_controller.catalog.manifest import (
    ACCEPT,
    MAX_MANIFEST_BYTES,
    Descriptor,
    Manifest,
    parse_manifest,
    verified_digest,
)
from flexinfer_controller.catalog.reference import (
    RegistryLocation,
    check_manifest_reference,
    check_repository,
)
from flexinfer_controller.catalog.responses import (
    check_response,
    json_body,
    read_limited,
    transport_error,
)

LIST_LIMIT = 16 << 20
MAX_PAGES = 10_000
CATALOG_SCOPE = "registry:catalog:*"


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How the client talks to registries."""

    timeout_s: float = 30.0
    verify: bool | str = True
    """TLS verification: True, False, or a CA bundle path."""
    clock: Callable[[], float] = time.monotonic
    """The clock token lifetimes are measured on (tests pass a manual one)."""


def pull_scope(repository: str) -> str:
    """The token scope that lets us read ``repository``."""
    return f"repository:{repository}:pull"


class OciClient:
    """A read-only client of one registry; use it as an async context manager."""

    def __init__(
        self,
        location: RegistryLocation,
        credentials: RegistryCredentials | None = None,
        *,
        options: ClientOptions | None = None,
        challenge: Challenge | None = None,
        basic_first: bool = False,
    ) -> None:
        options = options or ClientOptions()
        self.location = location
        self.registry = location.registry
        self._credentials = credentials
        self._http = httpx.AsyncClient(
            timeout=options.timeout_s, verify=options.verify, follow_redirects=True
        )
        self._auth = RegistryAuth(
            location,
            credentials,
            self._http,
            clock=options.clock,
            challenge=challenge,
            basic_first=basic_first,
        )

    async def __aenter__(self) -> OciClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def ping(self) -> None:
        """``GET /v2/``: the registry speaks the distribution API and accepts us."""
        try:
            await self._send("GET", "/v2/", scope="", what="GET /v2/")
        except NotFoundError as exc:
            raise RegistryProtocolError(self.registry, "no /v2/: not an OCI registry") from exc

    async def catalog(self, page_size: int = 100) -> list[str]:
        """Every repository ``/v2/_catalog`` lists, across pages."""
        return await self._paged("/v2/_catalog", "repositories", CATALOG_SCOPE, page_size)

    async def tags(self, repository: str, page_size: int = 100) -> list[str]:
        """Every tag of ``repository``, across pages."""
        check_repository(repository)
        path = f"/v2/{repository}/tags/list"
        return await self._paged(path, "tags", pull_scope(repository), page_size)

    async def head_manifest(self, repository: str, reference: str) -> Descriptor:
        """``HEAD`` a manifest: its digest without its body (GET when the header is absent)."""
        what = f"HEAD {repository}:{reference}"
        response, _ = await self._manifest_request("HEAD", repository, reference, what)
        header = response.headers.get("docker-content-digest")
        if header is None:
            manifest = await self.manifest(repository, reference)
            return Descriptor(manifest.media_type, manifest.digest, manifest.size)
        requested = reference if ":" in reference else None
        if requested is not None and header != requested:
            raise RegistryProtocolError(self.registry, f"{what}: answered digest {header}")
        length = response.headers.get("content-length", "")
        size = int(length) if length.isdigit() else 0
        media_type = response.headers.get("content-type", "").split(";", 1)[0]
        return Descriptor(media_type, header, size)

    async def manifest(self, repository: str, reference: str) -> Manifest:
        """``GET`` a manifest by tag or digest; its digest verified against its bytes."""
        sep = "@" if ":" in reference else ":"
        what = f"manifest {repository}{sep}{reference}"
        response, body = await self._manifest_request("GET", repository, reference, what)
        requested = reference if ":" in reference else None
        header = response.headers.get("docker-content-digest")
        digest = verified_digest(self.registry, what, body, header, requested)
        content_type = response.headers.get("content-type", "")
        return parse_manifest(self.registry, what, body, content_type, digest)

    async def total_size(self, repository: str, manifest: Manifest, depth: int = 0) -> int:
        """Bytes of every blob ``manifest`` names, through the children of an index."""
        if not manifest.is_index:
            return manifest.blob_size
        if depth >= 2:
            raise RegistryProtocolError(self.registry, f"{manifest.digest}: indexes nest too deep")
        total = 0
        for child in manifest.children:
            sub = await self.manifest(repository, child.digest)
            total += await self.total_size(repository, sub, depth + 1)
        return total

    async def api_json(self, path: str, params: dict[str, str]) -> tuple[Any, httpx.URL | None]:
        """A registry-specific JSON API (Harbor's): Basic auth, no token flow; (doc, next)."""
        headers = {"Accept": "application/json"}
        basic = basic_header(self._credentials) if self._credentials else None
        if basic is not None:
            headers["Authorization"] = basic
        url = httpx.URL(self.location.base_url + path, params=params)
        response, body = await self._exchange("GET", url, headers, f"GET {path}", LIST_LIMIT)
        check_response(response, self.registry, f"GET {path}", body)
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RegistryProtocolError(self.registry, f"GET {path}: not JSON") from exc
        return doc, self._next_link(response, url)

    async def _manifest_request(
        self, method: str, repository: str, reference: str, what: str
    ) -> tuple[httpx.Response, bytes]:
        check_repository(repository)
        check_manifest_reference(reference)
        path = f"/v2/{repository}/manifests/{reference}"
        return await self._send(
            method, path, scope=pull_scope(repository), what=what,
            headers={"Accept": ACCEPT}, limit=MAX_MANIFEST_BYTES,
        )  # fmt: skip

    async def _paged(self, path: str, key: str, scope: str, page_size: int) -> list[str]:
        url: httpx.URL | None = httpx.URL(self.location.base_url + path, params={"n": page_size})
        items: list[str] = []
        seen: set[str] = set()
        while url is not None:
            if str(url) in seen or len(seen) >= MAX_PAGES:
                raise RegistryProtocolError(self.registry, f"GET {path}: pagination loops")
            seen.add(str(url))
            response, body = await self._send("GET", url, scope=scope, what=f"GET {path}")
            page = json_body(body, self.registry, f"GET {path}").get(key) or []
            if not isinstance(page, list) or not all(isinstance(x, str) for x in page):
                raise RegistryProtocolError(self.registry, f"GET {path}: {key!r} is not a list")
            items.extend(page)
            url = self._next_link(response, url)
        return items

    def _next_link(self, response: httpx.Response, current: httpx.URL) -> httpx.URL | None:
        link = response.links.get("next", {}).get("url")
        if not link:
            return None
        url = current.join(link)
        if (url.scheme, url.netloc) != (current.scheme, current.netloc):
            # The next page would get our credentials: stay on the registry's origin.
            raise RegistryProtocolError(self.registry, f"pagination leaves the registry: {url}")
        return url

    async def _send(
        self,
        method: str,
        target: str | httpx.URL,
        *,
        scope: str,
        what: str,
        headers: dict[str, str] | None = None,
        limit: int = LIST_LIMIT,
    ) -> tuple[httpx.Response, bytes]:
        url = httpx.URL(self.location.base_url + target) if isinstance(target, str) else target
        sent = await self._auth.header(scope)
        response, body = await self._exchange(method, url, _with(headers, sent), what, limit)
        if response.status_code == 401:
            # One retry with whatever the challenge asks for; a second 401 is final.
            sent = await self._auth.answer(response, scope, sent)
            response, body = await self._exchange(method, url, _with(headers, sent), what, limit)
        check_response(response, self.registry, what, body)
        return response, body

    async def _exchange(
        self, method: str, url: httpx.URL, headers: dict[str, str], what: str, limit: int
    ) -> tuple[httpx.Response, bytes]:
        request = self._http.build_request(method, url, headers=headers)
        try:
            response = await self._http.send(request, stream=True)
            try:
                body = (
                    b""
                    if method == "HEAD"
                    else await read_limited(response, limit, self.registry, what)
                )
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            raise transport_error(self.registry, what, exc) from exc
        return response, body


def _with(headers: dict[str, str] | None, authorization: str | None) -> dict[str, str]:
    out = dict(headers or {})
    if authorization is not None:
        out["Authorization"] = authorization
    return out
