"""An in-process OCI registry for tests, speaking the distribution API on a real socket.

Shared by the controller's catalog tests and the registry service's OCI provider tests
(:mod:`.oci_push` pushes models into it).

It stores blobs and manifests in memory and serves: ``/v2/``; blob upload (POST then PUT,
or monolithic POST) and blob GET/HEAD; manifest PUT, GET/HEAD by tag or digest with
Accept negotiation; ``tags/list`` and ``_catalog`` with ``n``/``last`` pagination and
``Link`` headers. Auth is none, Basic, or Bearer tokens from its ``/token`` realm (GET
with Basic or anonymous, OAuth2 POST with a refresh token), checked per scope and
expiring on a manual clock. ``throttle`` answers 429 with Retry-After, ``tamper`` and
``tamper_blob`` serve bytes that do not match their digest, and ``harbor=True`` adds
Harbor's ``/api/v2.0`` systeminfo, projects and repositories listing (with ``_catalog``
for admins only).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from flexinfer_common.serving import serve_in_background

SERVICE = "test-registry"


@dataclass
class ManualClock:
    """A clock that moves only when told to: token expiry without sleeping."""

    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds


@dataclass
class _Grant:
    user: str | None
    scopes: frozenset[str]
    expires_at: float


def _error(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    body = {"errors": [{"code": code, "message": message, "detail": None}]}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _page(
    items: list[str], request: Request, key: str, max_page: int | None, **extra: str
) -> Response:
    items = sorted(items)
    last = request.query_params.get("last")
    if last is not None:
        items = [i for i in items if i > last]
    n_text = request.query_params.get("n")
    n = int(n_text) if n_text and n_text.isdigit() else None
    if max_page is not None:
        n = min(n, max_page) if n is not None else max_page
    headers = {}
    if n is not None and len(items) > n:
        items = items[:n]
        # A relative next link, as distribution's registry sends it.
        headers["Link"] = f'<{request.url.path}?n={n}&last={items[-1]}>; rel="next"'
    return JSONResponse({**extra, key: items}, headers=headers)


@dataclass
class TestRegistry:
    """Registry state plus its ASGI app; ``auth`` is ``none``, ``basic`` or ``bearer``."""

    __test__ = False  # not a pytest class, despite its name

    auth: str = "none"
    users: Mapping[str, str] = field(default_factory=dict)
    anonymous_pull: bool = False
    catalog_users: frozenset[str] | None = None
    """Who may read ``_catalog`` (None: every authenticated user)."""
    refresh_tokens: Mapping[str, str] = field(default_factory=dict)
    """Identity (refresh) token -> user, for the OAuth2 POST to the realm."""
    token_lifetime_s: int | None = 60
    clock: ManualClock = field(default_factory=ManualClock)
    harbor: bool = False
    realm: str | None = None
    """The token realm Bearer challenges name (None: this server's own ``/token``)."""
    max_page: int | None = None
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, dict[str, tuple[str, bytes]]] = field(default_factory=dict)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    grants: dict[str, _Grant] = field(default_factory=dict)
    token_requests: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    """(method, path, query) of every request, in order."""
    tampered: dict[str, bytes] = field(default_factory=dict)
    tampered_blobs: dict[str, bytes] = field(default_factory=dict)
    manifest_gate: asyncio.Event | None = None
    """When set, manifest GETs wait on it: lets a test see how many run at once."""
    in_flight: int = 0
    max_in_flight: int = 0
    _throttle: list[str] = field(default_factory=list)
    _uploads: dict[str, bytearray] = field(default_factory=dict)

    def throttle(self, count: int, retry_after: str = "7") -> None:
        """Answer the next ``count`` /v2/ requests 429 with ``Retry-After: retry_after``."""
        self._throttle += [retry_after] * count

    def recover(self) -> None:
        """Stop answering 429: the throttled requests not yet made are served again."""
        self._throttle.clear()

    def tamper(self, digest: str, body: bytes) -> None:
        """Serve ``body`` for the manifest ``digest`` (still claiming ``digest``)."""
        self.tampered[digest] = body

    def tamper_blob(self, digest: str, body: bytes) -> None:
        """Serve ``body`` for the blob ``digest`` (still claiming ``digest``)."""
        self.tampered_blobs[digest] = body

    def revoke_tokens(self) -> None:
        """Forget every issued token, as a token service rotating its keys would."""
        self.grants.clear()

    # -- auth ---------------------------------------------------------------------------

    def _basic_user(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        if not header.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        return user if self.users.get(user) == password and user else None

    def _allowed(self, user: str | None, scope: str) -> bool:
        if scope.startswith("registry:catalog"):
            return user is not None and (self.catalog_users is None or user in self.catalog_users)
        if scope.endswith(":pull"):
            return user is not None or self.anonymous_pull
        return user is not None

    def _challenge(self, request: Request, scope: str) -> Response:
        if self.auth == "basic":
            header = f'Basic realm="{SERVICE}"'
        else:
            realm = self.realm or f"{request.url.scheme}://{request.url.netloc}/token"
            header = f'Bearer realm="{realm}",service="{SERVICE}"'
            header += f',scope="{scope}"' if scope else ""
        return _error(401, "UNAUTHORIZED", "authentication required", {"WWW-Authenticate": header})

    def _check(self, request: Request, scope: str) -> Response | None:
        self.requests.append((request.method, request.url.path, request.url.query))
        if self._throttle:
            retry_after = self._throttle.pop(0)
            return _error(429, "TOOMANYREQUESTS", "slow down", {"Retry-After": retry_after})
        if self.auth == "none":
            return None
        if self.auth == "basic":
            user = self._basic_user(request)
            if user is None:
                return self._challenge(request, scope)
            ok = not scope or self._allowed(user, scope)
            return None if ok else _error(403, "DENIED", "access denied")
        header = request.headers.get("authorization", "")
        grant = self.grants.get(header[7:]) if header.startswith("Bearer ") else None
        if (
            grant is None
            or grant.expires_at <= self.clock()
            or (scope and scope not in grant.scopes)
        ):
            return self._challenge(request, scope)
        return None

    async def _token(self, request: Request) -> Response:
        if request.method == "POST":
            form = {k: v[-1] for k, v in parse_qs((await request.body()).decode()).items()}
            user = self.refresh_tokens.get(form.get("refresh_token", ""))
            if form.get("grant_type") != "refresh_token" or user is None:
                return JSONResponse({"error": "invalid_grant"}, status_code=401)
            scopes = form.get("scope", "").split()
        else:
            user = self._basic_user(request)
            if user is None and request.headers.get("authorization"):
                return JSONResponse({"details": "bad credentials"}, status_code=401)
            scopes = request.query_params.getlist("scope")
        self.token_requests.append({"method": request.method, "user": user, "scopes": scopes})
        granted = {
            f"{kind}:{name}:{action}"
            for kind, name, actions in (s.rsplit(":", 2) for s in scopes if s.count(":") >= 2)
            for action in actions.split(",")
            if self._allowed(user, f"{kind}:{name}:{action}")
        }
        token = secrets.token_urlsafe(16)
        lifetime = self.token_lifetime_s or 60
        self.grants[token] = _Grant(user, frozenset(granted), self.clock() + lifetime)
        doc: dict[str, Any] = {"token": token, "access_token": token}
        if self.token_lifetime_s is not None:
            doc["expires_in"] = self.token_lifetime_s
        return JSONResponse(doc)

    # -- distribution API ---------------------------------------------------------------

    async def _base(self, request: Request) -> Response:
        if denied := self._check(request, ""):
            return denied
        return JSONResponse({}, headers={"Docker-Distribution-API-Version": "registry/2.0"})

    async def _catalog(self, request: Request) -> Response:
        if denied := self._check(request, "registry:catalog:*"):
            return denied
        return _page(list(self.tags), request, "repositories", self.max_page)

    async def _tags_list(self, request: Request) -> Response:
        name = request.path_params["name"]
        if denied := self._check(request, f"repository:{name}:pull"):
            return denied
        if name not in self.tags:
            return _error(404, "NAME_UNKNOWN", f"repository {name} not known")
        return _page(list(self.tags[name]), request, "tags", self.max_page, name=name)

    async def _manifest(self, request: Request) -> Response:
        name, ref = request.path_params["name"], request.path_params["reference"]
        action = "push" if request.method == "PUT" else "pull"
        if denied := self._check(request, f"repository:{name}:{action}"):
            return denied
        if request.method == "PUT":
            return await self._put_manifest(request, name, ref)
        digest = self.tags.get(name, {}).get(ref, ref)
        stored = self.manifests.get(name, {}).get(digest)
        accept = request.headers.get("accept", "*/*")
        if stored is None or (stored[0] not in accept and "*/*" not in accept):
            return _error(404, "MANIFEST_UNKNOWN", f"manifest {ref} not known")
        if self.manifest_gate is not None:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await self.manifest_gate.wait()
            finally:
                self.in_flight -= 1
        body = self.tampered.get(digest, stored[1])
        headers = {
            "Content-Type": stored[0],
            "Docker-Content-Digest": digest,
            "Content-Length": str(len(body)),
        }
        return Response(b"" if request.method == "HEAD" else body, headers=headers)

    async def _put_manifest(self, request: Request, name: str, ref: str) -> Response:
        body = await request.body()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        doc = json.loads(body)
        media_type = request.headers.get("content-type", doc.get("mediaType", ""))
        wanted = [doc.get("config")] if "config" in doc else []
        wanted += doc.get("layers", []) + doc.get("blobs", [])
        if missing := [d["digest"] for d in wanted if d and d["digest"] not in self.blobs]:
            return _error(400, "MANIFEST_BLOB_UNKNOWN", f"blob {missing[0]} not known")
        children = [d["digest"] for d in doc.get("manifests", [])]
        if any(c not in self.manifests.get(name, {}) for c in children):
            return _error(400, "MANIFEST_UNKNOWN", "a child manifest is not known")
        if ref.startswith("sha256:") and ref != digest:
            return _error(400, "DIGEST_INVALID", "body does not match the digest")
        self.manifests.setdefault(name, {})[digest] = (media_type, body)
        tags = self.tags.setdefault(name, {})
        if not ref.startswith("sha256:"):
            tags[ref] = digest
        headers = {"Location": f"/v2/{name}/manifests/{digest}", "Docker-Content-Digest": digest}
        return Response(status_code=201, headers=headers)

    async def _blob(self, request: Request) -> Response:
        name, digest = request.path_params["name"], request.path_params["digest"]
        if denied := self._check(request, f"repository:{name}:pull"):
            return denied
        if digest not in self.blobs:
            return _error(404, "BLOB_UNKNOWN", f"blob {digest} not known")
        body = self.tampered_blobs.get(digest, self.blobs[digest])
        headers = {"Docker-Content-Digest": digest, "Content-Length": str(len(body))}
        return Response(b"" if request.method == "HEAD" else body, headers=headers,
                        media_type="application/octet-stream")  # fmt: skip

    async def _upload(self, request: Request) -> Response:
        name = request.path_params["name"]
        if denied := self._check(request, f"repository:{name}:push"):
            return denied
        upload = request.path_params.get("upload")
        if upload is None:
            upload = secrets.token_hex(8)
            self._uploads[upload] = bytearray()
        if upload not in self._uploads:
            return _error(404, "BLOB_UPLOAD_UNKNOWN", "upload not known")
        self._uploads[upload] += await request.body()
        digest = request.query_params.get("digest")
        if digest is None:  # POST that opens an upload session
            headers = {"Location": f"/v2/{name}/blobs/uploads/{upload}", "Range": "0-0"}
            return Response(status_code=202, headers=headers)
        data = bytes(self._uploads.pop(upload))
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            return _error(400, "DIGEST_INVALID", "content does not match the digest")
        self.blobs[digest] = data
        headers = {"Location": f"/v2/{name}/blobs/{digest}", "Docker-Content-Digest": digest}
        return Response(status_code=201, headers=headers)

    # -- Harbor API ---------------------------------------------------------------------

    async def _harbor(self, request: Request) -> Response:
        self.requests.append((request.method, request.url.path, request.url.query))
        if self.auth != "none" and self._basic_user(request) is None:
            return _error(401, "UNAUTHORIZED", "unauthorized")
        project = request.path_params.get("project")
        if project is None:
            names = sorted({repo.split("/", 1)[0] for repo in self.tags})
        else:
            names = sorted(r for r in self.tags if r.startswith(project + "/"))
        page = int(request.query_params.get("page", "1"))
        size = int(request.query_params.get("page_size", "10"))
        chunk = names[(page - 1) * size : page * size]
        headers = {"X-Total-Count": str(len(names))}
        if page * size < len(names):
            headers["Link"] = f'<{request.url.path}?page={page + 1}&page_size={size}>; rel="next"'
        return JSONResponse([{"name": n, "artifact_count": 1} for n in chunk], headers=headers)

    async def _systeminfo(self, request: Request) -> Response:
        return JSONResponse({"harbor_version": "v2.11.0-test", "auth_mode": "db_auth"})

    def app(self) -> Starlette:
        """The registry's ASGI app."""
        routes = [
            Route("/token", self._token, methods=["GET", "POST"]),
            Route("/v2/", self._base, methods=["GET"]),
            Route("/v2/_catalog", self._catalog, methods=["GET"]),
            Route("/v2/{name:path}/tags/list", self._tags_list, methods=["GET"]),
            Route("/v2/{name:path}/manifests/{reference}", self._manifest,
                  methods=["GET", "HEAD", "PUT"]),
            Route("/v2/{name:path}/blobs/uploads/", self._upload, methods=["POST"]),
            Route("/v2/{name:path}/blobs/uploads/{upload}", self._upload, methods=["PUT"]),
            Route("/v2/{name:path}/blobs/{digest}", self._blob, methods=["GET", "HEAD"]),
        ]  # fmt: skip
        if self.harbor:
            routes += [
                Route("/api/v2.0/systeminfo", self._systeminfo, methods=["GET"]),
                Route("/api/v2.0/projects", self._harbor, methods=["GET"]),
                Route("/api/v2.0/projects/{project}/repositories", self._harbor, methods=["GET"]),
            ]
        return Starlette(routes=routes)


@asynccontextmanager
async def serve_registry(registry: TestRegistry) -> AsyncIterator[str]:
    """Serve ``registry`` on a free loopback port for the block; yields ``http://host:port``."""
    async with serve_in_background(registry.app()) as url:
        yield url
