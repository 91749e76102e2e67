"""Google Cloud Storage: ``gs://bucket/prefix`` through the GCS JSON API, CRC32C-verified.

Endpoint: ``STORAGE_EMULATOR_HOST`` (the setting Google's client libraries honour for an
emulator; no credentials are sent then), else ``https://storage.googleapis.com``. Credentials:
``GOOGLE_OAUTH_ACCESS_TOKEN`` if set, else Application Default Credentials through
``google.auth`` when it is installed, else anonymous (public buckets).

Like ModelExpress' GcsProvider it skips dotfiles, READMEs and images, verifies every object
against its CRC32C, and writes ``.mx/manifest.json`` (version, ``gs://`` model URL, and per file
path/size/crc32c hex/generation). An existing manifest lets a re-download skip files already
present with the same size, CRC32C and generation.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import google_crc32c
import httpx

from flexinfer_common.errors import NotFoundError
from flexinfer_registry.adapters.providers.http import (
    download_to,
    get_json,
    make_client,
)
from flexinfer_registry.core.providers.base import (
    DownloadResult,
    FileInfo,
    ModelProvider,
    ProgressCallback,
    ProviderConfig,
)
from flexinfer_registry.core.providers.files import (
    ProgressMeter,
    check_digest,
    check_size,
    is_image,
    parse_bucket_url,
    select,
    target_path,
)

MANIFEST_PATH = ".mx/manifest.json"
MANIFEST_VERSION = 1
DEFAULT_API_ROOT = "https://storage.googleapis.com"


class Crc32c:
    """google_crc32c behind the small hasher protocol the downloader feeds."""

    def __init__(self) -> None:
        self._value = 0

    def update(self, data: bytes, /) -> None:
        """Extend the running CRC with ``data``."""
        self._value = google_crc32c.extend(self._value, data)

    def hexdigest(self) -> str:
        """The CRC32C as 8 lower-case hex digits."""
        return f"{self._value:08x}"


def parse_gs_url(model_name: str) -> tuple[str, str]:
    """``gs://bucket/prefix`` -> (bucket, prefix without slashes at either end)."""
    return parse_bucket_url(model_name, "gs", "GCS", "an object prefix")


def crc32c_hex(field: str) -> str:
    """GCS's base64 big-endian crc32c field as 8 hex digits."""
    return base64.b64decode(field).hex()


def skipped(relative: str) -> bool:
    """Dotfiles, READMEs and images are not part of a served model (ModelExpress' rule)."""
    name = PurePosixPath(relative).name
    hidden = any(part.startswith(".") for part in PurePosixPath(relative).parts)
    return hidden or name.upper().startswith("README") or is_image(relative)


class GcsProvider(ModelProvider):
    """Models stored as objects under a GCS prefix."""

    name = "gcs"

    def __init__(self, config: ProviderConfig | None = None) -> None:
        self._config = config or ProviderConfig()

    def _env(self) -> dict[str, str]:
        import os

        return dict(self._config.env) if self._config.env is not None else dict(os.environ)

    def _endpoint(self) -> tuple[str, bool]:
        """(API root, whether it is an emulator)."""
        emulator = self._env().get("STORAGE_EMULATOR_HOST", "").rstrip("/")
        if emulator:
            if "://" not in emulator:
                emulator = f"http://{emulator}"
            return emulator, True
        return DEFAULT_API_ROOT, False

    def _auth_headers(self, emulator: bool) -> dict[str, str]:
        if emulator:
            return {}
        token = self._env().get("GOOGLE_OAUTH_ACCESS_TOKEN") or _adc_token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def download(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        *,
        ignore_weights: bool = False,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        """List the prefix, download each object, verify its CRC32C, write the manifest."""
        bucket, prefix = parse_gs_url(model_name)
        root, emulator = self._endpoint()
        headers = self._auth_headers(emulator)
        async with make_client(self._config) as client:
            objects = await self._list(client, root, bucket, prefix, headers)
            by_rel = {o["name"][len(prefix) + 1 :]: o for o in objects}
            # select() first, so a traversal name is refused rather than skipped as hidden.
            names = select(
                [r for r in by_rel if not r.endswith("/")], ignore_weights=ignore_weights
            )
            wanted = [r for r in names if not skipped(r)]
            if not wanted:
                raise NotFoundError(f"no model files under gs://{bucket}/{prefix}/")
            meter = ProgressMeter(progress, sum(int(by_rel[r]["size"]) for r in wanted))
            previous = _read_manifest(dest_dir)
            fetch = _Fetch(client, root, bucket, headers, dest_dir, meter, previous)
            entries = [await fetch.one(by_rel[rel], rel) for rel in wanted]
        _write_manifest(dest_dir, f"gs://{bucket}/{prefix}", entries)
        files = tuple(
            FileInfo(path=e["path"], size=e["size"], checksum=f"crc32c:{e['crc32c']}")
            for e in entries
        )
        return DownloadResult(resolved_revision=revision, files=files)

    async def _list(
        self,
        client: httpx.AsyncClient,
        root: str,
        bucket: str,
        prefix: str,
        headers: dict[str, str],
    ) -> list[dict[str, Any]]:
        url = f"{root}/storage/v1/b/{quote(bucket, safe='')}/o"
        what = f"GCS list gs://{bucket}/{prefix}/"
        objects: list[dict[str, Any]] = []
        params = {
            "prefix": f"{prefix}/",
            "fields": "items(name,size,crc32c,generation),nextPageToken",
        }
        while True:
            page = await get_json(client, url, what, headers=headers, params=params)
            if not isinstance(page, dict):
                raise NotFoundError(f"{what}: unexpected answer")
            objects.extend(i for i in page.get("items", []) if isinstance(i, dict))
            token = page.get("nextPageToken")
            if not token:
                return objects
            params = {**params, "pageToken": str(token)}


@dataclass
class _Fetch:
    """Downloads objects of one listing into ``dest_dir``, verifying each."""

    client: httpx.AsyncClient
    root: str
    bucket: str
    headers: dict[str, str]
    dest_dir: Path
    meter: ProgressMeter
    previous: dict[str, dict[str, Any]]

    async def one(self, obj: dict[str, Any], rel: str) -> dict[str, Any]:
        """Fetch one object (unless the manifest proves it cached) and return its entry."""
        size = int(obj["size"])
        expected = crc32c_hex(str(obj["crc32c"]))
        generation = int(obj["generation"]) if obj.get("generation") else None
        entry = {"path": rel, "size": size, "crc32c": expected, "generation": generation}
        target = target_path(self.dest_dir, rel)
        if self.previous.get(rel) == entry and target.is_file() and target.stat().st_size == size:
            self.meter.add(size)  # cached by an earlier, verified download of this generation
            return entry
        name = quote(obj["name"], safe="")
        url = f"{self.root}/storage/v1/b/{quote(self.bucket, safe='')}/o/{name}?alt=media"
        url += f"&generation={generation}" if generation else ""
        crc = Crc32c()
        got = await download_to(
            self.client, url, target, what=f"GCS download {rel}", meter=self.meter,
            hashers={"crc32c": crc}, headers=self.headers,
        )  # fmt: skip
        try:
            check_size(rel, got, size)
            check_digest(rel, "crc32c", crc.hexdigest(), expected)
        except Exception:
            target.unlink(missing_ok=True)
            raise
        return entry


def _read_manifest(dest_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((dest_dir / MANIFEST_PATH).read_text())
        if data.get("version") != MANIFEST_VERSION:
            return {}
        return {str(f["path"]): dict(f) for f in data.get("files", [])}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _write_manifest(dest_dir: Path, model: str, entries: list[dict[str, Any]]) -> None:
    path = dest_dir / MANIFEST_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "version": MANIFEST_VERSION,
        "model": model,
        "files": sorted(entries, key=lambda e: e["path"]),
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(path)


def _adc_token() -> str | None:
    """An access token from Application Default Credentials, if google-auth is installed."""
    try:
        import google.auth  # type: ignore[import-untyped,import-not-found,unused-ignore]
        from google.auth.transport.requests import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            Request,
        )
    except ImportError:
        return None
    try:
        scope = "https://www.googleapis.com/auth/devstorage.read_only"
        credentials, _ = google.auth.default(scopes=[scope])
        credentials.refresh(Request())
        return str(credentials.token)
    except Exception:  # no ADC configured: fall back to anonymous access to public buckets
        return None
