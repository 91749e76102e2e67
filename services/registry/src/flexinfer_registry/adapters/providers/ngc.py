"""NVIDIA NGC: the files-manifest endpoint with presigned URLs, and the checksums fallback.

Model names (``ngc://`` prefix optional), as ModelExpress parses them:
``org/name/version``, ``org/team/name/version``, ``org/team/type/name/version``, and
``catalog/org/name:version`` (= org ``catalog``, team ``org``). The type defaults to ``models``.

Endpoints (base ``NGC_API_ENDPOINT``, default https://api.ngc.nvidia.com):

1. Token: API keys starting ``nvapi-`` are Bearer tokens as they are; other keys are exchanged
   at ``{NGC_AUTH_ENDPOINT}/token?service=ngc&scope=group/ngc:{org}[/{team}]`` (basic auth
   ``$oauthtoken``:key; default https://authn.nvidia.com) for ``{"token": …}``. The key comes
   from NGC_API_KEY or NGC_CLI_API_KEY.
2. Files manifest: ``GET /v2/org/{org}[/team/{team}]/{type}/{name}/{version}/files`` (no
   ``versions/`` segment) answers ``{"urls": [...], "filepath": [...],
   "paginationInfo": {"totalPages": n}}`` with self-authenticating presigned URLs; they are
   fetched WITHOUT the Authorization header. Pages are walked with ``page-number``.
3. Fallback, when the manifest answers 400 or 401 (UAM-gated orgs): ``GET …/{name}/versions/
   {version}/files/checksums.blake3`` (lines ``{blake3}  {path}``) enumerates the files, each
   then fetched with Bearer auth from ``…/versions/{version}/files/{path}``.

Verification: when the artifact has a ``checksums.blake3`` (fetched in both paths when
listed), every file is checked against its BLAKE3; otherwise against the Content-Length.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
from blake3 import blake3

from flexinfer_common.errors import InvalidSpecError
from flexinfer_registry.adapters.providers.http import (
    check_status,
    download_to,
    get_json,
    make_client,
    translate_transport,
)
from flexinfer_registry.core.providers.base import (
    AccessDeniedError,
    DownloadResult,
    FileInfo,
    ModelProvider,
    ProgressCallback,
    ProviderConfig,
    SourceUnreachableError,
)
from flexinfer_registry.core.providers.files import (
    ProgressMeter,
    check_digest,
    check_size,
    select,
    target_path,
)

DEFAULT_API = "https://api.ngc.nvidia.com"
DEFAULT_AUTHN = "https://authn.nvidia.com"
CHECKSUMS = "checksums.blake3"
PAGE_SIZE = 500


@dataclass(frozen=True)
class NgcArtifact:
    """A parsed NGC artifact name."""

    org: str
    team: str | None
    kind: str
    name: str
    version: str

    def scope(self) -> str:
        """The token scope for this artifact."""
        return f"group/ngc:{self.org}" + (f"/{self.team}" if self.team else "")

    def base(self, api: str) -> str:
        """``{api}/v2/org/{org}[/team/{team}]/{type}/{name}``."""
        team = f"/team/{quote(self.team, safe='')}" if self.team else ""
        return (
            f"{api}/v2/org/{quote(self.org, safe='')}{team}/{self.kind}/{quote(self.name, safe='')}"
        )


def parse_ngc_name(model_name: str) -> NgcArtifact:
    """Parse the NGC model name forms ModelExpress accepts."""
    raw = model_name.strip().removeprefix("ngc://")
    parts = raw.split("/")
    bad = any(p in ("", ".", "..") or not p.isprintable() for p in parts)
    if bad or len(parts) not in (3, 4, 5):
        raise InvalidSpecError(
            "NGC model name must be org/name/version, org/team/name/version, "
            f"org/team/type/name/version or catalog/org/name:version; got {model_name[:120]!r}",
            field="model_name",
        )
    if len(parts) == 3 and ":" in parts[2]:
        name, _, version = parts[2].partition(":")
        return NgcArtifact(parts[0], parts[1], "models", name, version)
    if len(parts) == 3:
        return NgcArtifact(parts[0], None, "models", parts[1], parts[2])
    if len(parts) == 4:
        return NgcArtifact(parts[0], parts[1], "models", parts[2], parts[3])
    return NgcArtifact(parts[0], parts[1], parts[2], parts[3], parts[4])


def parse_checksums(text: str) -> dict[str, str]:
    """``{blake3}  {path}`` lines -> path -> hex digest."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        digest, sep, path = line.strip().partition("  ")
        if sep and path.strip():
            found[path.strip()] = digest.strip().lower()
    return found


class NgcProvider(ModelProvider):
    """Models and resources in the NVIDIA NGC catalog."""

    name = "ngc"

    def __init__(self, config: ProviderConfig | None = None) -> None:
        self._config = config or ProviderConfig()
        env = self._config.env if self._config.env is not None else os.environ
        self._api = (env.get("NGC_API_ENDPOINT") or DEFAULT_API).rstrip("/")
        self._authn = (env.get("NGC_AUTH_ENDPOINT") or DEFAULT_AUTHN).rstrip("/")
        self._key = (env.get("NGC_API_KEY") or env.get("NGC_CLI_API_KEY") or "").strip()

    async def _token(self, client: httpx.AsyncClient, artifact: NgcArtifact) -> str:
        if not self._key:
            raise AccessDeniedError("NGC API key not set: set NGC_API_KEY or NGC_CLI_API_KEY")
        if self._key.startswith("nvapi-"):
            return self._key
        basic = base64.b64encode(f"$oauthtoken:{self._key}".encode()).decode()
        answer = await get_json(
            client, f"{self._authn}/token", "NGC token exchange",
            headers={"Authorization": f"Basic {basic}"},
            params={"service": "ngc", "scope": artifact.scope()},
        )  # fmt: skip
        if not isinstance(answer, dict) or not isinstance(answer.get("token"), str):
            raise AccessDeniedError("NGC token exchange: answer has no token")
        return str(answer["token"])

    async def download(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        *,
        ignore_weights: bool = False,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        """Enumerate the artifact's files, download and verify each."""
        artifact = parse_ngc_name(model_name)
        async with make_client(self._config) as client:
            auth = {"Authorization": f"Bearer {await self._token(client, artifact)}"}
            urls = await self._manifest(client, artifact, auth)
            presigned = urls is not None
            versioned = (
                f"{artifact.base(self._api)}/versions/{quote(artifact.version, safe='')}/files"
            )
            checksums: dict[str, str] = {}
            if urls is None or CHECKSUMS in urls:
                checksums = await self._checksums(client, versioned, auth, urls)
            if urls is None:
                urls = {p: f"{versioned}/{quote(p)}" for p in checksums}
            wanted = [p for p in select(urls, ignore_weights=ignore_weights) if p != CHECKSUMS]
            meter = ProgressMeter(progress, None)
            files = []
            for rel in wanted:
                headers = {} if presigned else auth  # presigned URLs must not carry our token
                files.append(
                    await self._fetch(client, urls[rel], rel, dest_dir, headers, meter, checksums)
                )
        return DownloadResult(resolved_revision=artifact.version, files=tuple(files))

    async def _manifest(
        self, client: httpx.AsyncClient, artifact: NgcArtifact, auth: dict[str, str]
    ) -> dict[str, str] | None:
        """Relative path -> presigned URL, or None when the listing is gated (400/401)."""
        url = f"{artifact.base(self._api)}/{quote(artifact.version, safe='')}/files"
        what = f"NGC files manifest {artifact.org}/{artifact.name}:{artifact.version}"
        found: dict[str, str] = {}
        page, pages = 1, 1
        while page <= pages:
            params = {"page-size": str(PAGE_SIZE), "page-number": str(page)}
            with translate_transport(what):
                response = await client.get(url, headers=auth, params=params)
            if response.status_code in (400, 401):
                return None
            check_status(response, what)
            body = response.json()
            paths, links = body.get("filepath") or [], body.get("urls") or []
            if len(paths) != len(links):
                raise SourceUnreachableError(f"{what}: url/filepath counts differ")
            found.update(zip(map(str, paths), map(str, links), strict=True))
            pages = int((body.get("paginationInfo") or {}).get("totalPages") or 1)
            page += 1
        return found

    async def _checksums(
        self,
        client: httpx.AsyncClient,
        versioned: str,
        auth: dict[str, str],
        urls: dict[str, str] | None,
    ) -> dict[str, str]:
        what = f"NGC {CHECKSUMS}"
        url, headers = (urls[CHECKSUMS], {}) if urls else (f"{versioned}/{CHECKSUMS}", auth)
        with translate_transport(what):
            response = await client.get(url, headers=headers)
        check_status(response, what)
        return parse_checksums(response.text)

    async def _fetch(
        self,
        client: httpx.AsyncClient,
        url: str,
        rel: str,
        dest_dir: Path,
        headers: dict[str, str],
        meter: ProgressMeter,
        checksums: dict[str, str],
    ) -> FileInfo:
        target = target_path(dest_dir, rel)
        hasher = blake3()
        announced: list[int | None] = [None]

        def on_headers(h: httpx.Headers) -> None:
            length = h.get("content-length")
            encoded = h.get("content-encoding", "identity") != "identity"  # length is on the wire
            announced[0] = int(length) if length and length.isdigit() and not encoded else None

        size = await download_to(client, url, target, what=f"NGC download {rel}", meter=meter,
                                 hashers={"blake3": hasher}, headers=headers,
                                 on_headers=on_headers)  # fmt: skip
        try:
            check_size(rel, size, announced[0])
            if rel in checksums:
                check_digest(rel, "blake3", hasher.hexdigest(), checksums[rel])
                return FileInfo(path=rel, size=size, checksum=f"blake3:{checksums[rel]}")
        except Exception:
            target.unlink(missing_ok=True)
            raise
        return FileInfo(path=rel, size=size, checksum="size")
