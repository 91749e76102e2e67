"""One local HTTP server speaking the Hugging Face Hub, GCS JSON and NGC protocols.

Tests point the real clients at it through their documented endpoint settings (HF_ENDPOINT,
STORAGE_EMULATOR_HOST, NGC_API_ENDPOINT / NGC_AUTH_ENDPOINT). Only the endpoints the
registry's providers call are implemented, with the response shapes of the real services:

- HF: ``GET /api/models/{repo}/revision/{rev}?blobs=true``; ``HEAD|GET /{repo}/resolve/{rev}/{f}``
- GCS: ``GET /storage/v1/b/{bucket}/o?prefix=&pageToken=``; ``GET …/o/{object}?alt=media``
- NGC: ``GET /token``; ``GET /v2/org/{org}[/team/{t}]/{type}/{name}/{version}/files`` (the
  files manifest with presigned URLs); ``GET …/{name}/versions/{version}/files/{path}``
  (Bearer-authenticated) and ``GET /presigned/{sig}/{path}``.

Knobs make it misbehave on purpose: ``corrupt`` paths are served with one byte flipped (same
size, wrong checksum), ``ngc_listing_status`` makes the NGC files manifest answer 401, and
``hold`` stops a large body part-way until the test releases it (a download caught in the
middle, for fault injection).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import google_crc32c
from blake3 import blake3


def git_blob_sha1(data: bytes) -> str:
    """The git blob id of ``data`` (what the Hub reports as a non-LFS file's blobId)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def crc32c_b64(data: bytes) -> str:
    """GCS's crc32c field: base64 of the big-endian CRC32C."""
    value = google_crc32c.value(data)
    return base64.b64encode(value.to_bytes(4, "big")).decode()


@dataclass
class HfCommit:
    """One commit of a Hub repo."""

    sha: str
    files: dict[str, bytes]
    lfs_suffixes: tuple[str, ...] = (".safetensors", ".bin")


@dataclass
class Hold:
    """Bodies longer than ``after`` bytes stop there until ``release`` is set; ``reached``
    is set once the first ``after`` bytes of one are sent."""

    after: int
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@dataclass
class FixtureState:
    """Everything the server serves; tests mutate it before or between requests."""

    hf: dict[str, dict[str, HfCommit]] = field(default_factory=dict)
    """repo id -> (branch name or commit sha) -> commit."""
    gcs: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """bucket -> object name -> content."""
    ngc: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """"org[/team]/type/name/version" -> relative path -> content."""
    corrupt: set[str] = field(default_factory=set)
    """Relative paths (HF, NGC) or object names (GCS) served with one byte flipped."""
    ngc_listing_status: int = 200
    """Status of the NGC files manifest; 401 or 400 forces the checksums.blake3 fallback."""
    ngc_token: str = "fixture-bearer"
    gcs_page_size: int = 2
    hold: Hold | None = None
    requests: list[str] = field(default_factory=list)

    def add_hf(self, repo: str, sha: str, files: dict[str, bytes], *, branch: str = "main") -> None:
        """Add a commit to ``repo`` and point ``branch`` at it."""
        commit = HfCommit(sha=sha, files=files)
        self.hf.setdefault(repo, {})[sha] = commit
        self.hf[repo][branch] = commit

    def add_ngc(
        self, artifact: str, files: dict[str, bytes], *, blake3_manifest: bool = True
    ) -> None:
        """Add an NGC artifact, with a ``checksums.blake3`` listing every file by default."""
        content = dict(files)
        if blake3_manifest:
            lines = [f"{blake3(data).hexdigest()}  {path}" for path, data in sorted(files.items())]
            content["checksums.blake3"] = ("\n".join(lines) + "\n").encode()
        self.ngc[artifact] = content

    def served(self, key: str, data: bytes) -> bytes:
        """``data`` as served: flipped first byte when ``key`` is marked corrupt."""
        if key in self.corrupt and data:
            return bytes([data[0] ^ 0xFF]) + data[1:]
        return data


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``state.requests`` instead."""

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, *, head: bool) -> None:
        state = self.server.state
        parts = urlsplit(self.path)
        state.requests.append(f"{self.command} {parts.path}")
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        path = parts.path
        if path.startswith("/api/models/"):
            self._hf_info(path.removeprefix("/api/models/"))
        elif "/resolve/" in path:
            self._hf_resolve(path, head=head)
        elif path.startswith("/storage/v1/b/"):
            self._gcs(path.removeprefix("/storage/v1/b/"), query)
        elif path == "/token":
            self._json(200, {"token": state.ngc_token})
        elif path.startswith("/presigned/"):
            self._ngc_presigned(path.removeprefix("/presigned/"))
        elif path.startswith("/v2/org/"):
            self._ngc(path.removeprefix("/v2/org/"))
        else:
            self._json(404, {"error": "no such endpoint"})

    # -- plumbing -----------------------------------------------------------------------
    def _json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        self._bytes(status, json.dumps(body).encode(), "application/json", headers)

    def _bytes(
        self,
        status: int,
        data: bytes,
        content_type: str = "application/octet-stream",
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if head:
            return
        hold = self.server.state.hold
        if hold is not None and len(data) > hold.after:
            self.wfile.write(data[: hold.after])
            self.wfile.flush()
            hold.reached.set()
            hold.release.wait(120)
            data = data[hold.after :]
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client died mid-body
            self.close_connection = True

    # -- Hugging Face --------------------------------------------------------------------
    def _hf_commit(self, repo: str, revision: str) -> HfCommit | None:
        revs = self.server.state.hf.get(repo)
        if revs is None:
            self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            return None
        commit = revs.get(revision)
        if commit is None:
            self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
        return commit

    def _hf_info(self, rest: str) -> None:
        repo, _, revision = rest.partition("/revision/")
        commit = self._hf_commit(repo, unquote(revision or "main"))
        if commit is None:
            return
        siblings: list[dict[str, Any]] = []
        for name, data in sorted(commit.files.items()):
            entry: dict[str, Any] = {"rfilename": name, "size": len(data)}
            if name.endswith(commit.lfs_suffixes):
                sha = hashlib.sha256(data).hexdigest()
                entry["lfs"] = {"sha256": sha, "size": len(data), "pointerSize": 134}
                entry["blobId"] = git_blob_sha1(sha.encode())
            else:
                entry["blobId"] = git_blob_sha1(data)
            siblings.append(entry)
        self._json(200, {"id": repo, "modelId": repo, "sha": commit.sha, "siblings": siblings})

    def _hf_resolve(self, path: str, *, head: bool) -> None:
        repo, _, rest = path.lstrip("/").partition("/resolve/")
        revision, _, filename = rest.partition("/")
        commit = self._hf_commit(repo, unquote(revision))
        if commit is None:
            return
        name = unquote(filename)
        if name not in commit.files:
            self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            return
        data = commit.files[name]
        is_lfs = name.endswith(commit.lfs_suffixes)
        etag = hashlib.sha256(data).hexdigest() if is_lfs else git_blob_sha1(data)
        headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{etag}"'}
        if is_lfs:
            headers["X-Linked-Etag"] = f'"{etag}"'
            headers["X-Linked-Size"] = str(len(data))
        self._bytes(200, self.server.state.served(name, data), headers=headers, head=head)

    # -- GCS JSON API ----------------------------------------------------------------------
    def _gcs(self, rest: str, query: dict[str, str]) -> None:
        bucket, _, tail = rest.partition("/o")
        objects = self.server.state.gcs.get(unquote(bucket))
        if objects is None:
            message = "The specified bucket does not exist."
            self._json(404, {"error": {"code": 404, "message": message}})
            return
        if tail in ("", "/"):
            self._gcs_list(objects, query)
            return
        name = unquote(tail.removeprefix("/"))
        if name not in objects or query.get("alt") != "media":
            self._json(404, {"error": {"code": 404, "message": f"No such object: {name}"}})
            return
        data = objects[name]
        headers = {"x-goog-hash": f"crc32c={crc32c_b64(data)}", "x-goog-generation": "1"}
        self._bytes(200, self.server.state.served(name, data), headers=headers)

    def _gcs_list(self, objects: dict[str, bytes], query: dict[str, str]) -> None:
        prefix = query.get("prefix", "")
        names = sorted(n for n in objects if n.startswith(prefix))
        start = int(query.get("pageToken", "0"))
        page = names[start : start + self.server.state.gcs_page_size]
        items = [
            {
                "kind": "storage#object",
                "name": n,
                "size": str(len(objects[n])),
                "crc32c": crc32c_b64(objects[n]),
                "generation": str(1000 + i),
            }
            for i, n in enumerate(page, start)
        ]
        body: dict[str, Any] = {"kind": "storage#objects", "items": items}
        if start + len(page) < len(names):
            body["nextPageToken"] = str(start + len(page))
        self._json(200, body)

    # -- NGC -------------------------------------------------------------------------------
    def _ngc(self, rest: str) -> None:
        state = self.server.state
        if "/versions/" in rest:
            head, _, tail = rest.partition("/versions/")
            version, _, file_path = tail.partition("/files/")
            if self.headers.get("Authorization") != f"Bearer {state.ngc_token}":
                self._json(401, {"requestStatus": {"statusCode": "UNAUTHORIZED"}})
                return
            files = state.ngc.get(f"{_ngc_key(head)}/{version}")
            name = unquote(file_path)
            if files is None or name not in files:
                self._json(404, {"requestStatus": {"statusCode": "NOT_FOUND"}})
                return
            self._bytes(200, state.served(name, files[name]))
            return
        artifact = _ngc_key(rest.removesuffix("/files"))
        files = state.ngc.get(artifact)
        if files is None:
            self._json(404, {"requestStatus": {"statusCode": "NOT_FOUND"}})
        elif state.ngc_listing_status != 200:
            status = state.ngc_listing_status
            self._json(status, {"requestStatus": {"statusCode": "Org contex missing"}})
        else:
            base = f"http://{self.headers.get('Host')}/presigned"
            names = sorted(files)
            sig = quote(artifact, safe="")
            self._json(
                200,
                {
                    "requestStatus": {"statusCode": "SUCCESS"},
                    "urls": [f"{base}/{sig}/{quote(n)}?X-Amz-Signature=fixture" for n in names],
                    "filepath": names,
                    "paginationInfo": {"totalPages": 1},
                },
            )

    def _ngc_presigned(self, rest: str) -> None:
        state = self.server.state
        sig, _, name = rest.partition("/")
        files = state.ngc.get(unquote(sig), {})
        name = unquote(name)
        if self.headers.get("Authorization"):
            self._json(400, {"error": "presigned URLs must not carry Authorization"})
        elif name not in files:
            self._json(404, {"error": "NoSuchKey"})
        else:
            self._bytes(200, state.served(name, files[name]))


def _ngc_key(path: str) -> str:
    """``org/team/t/models/n/v`` -> ``org/t/models/n/v`` (the fixture's artifact key)."""
    return path.replace("/team/", "/", 1)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, state: FixtureState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


@dataclass
class ProviderFixture:
    """A running fixture server: its base URL and the state it serves."""

    url: str
    state: FixtureState

    def env(self, **extra: str) -> dict[str, str]:
        """Environment pointing every provider at this server."""
        return {
            "HF_ENDPOINT": self.url,
            "STORAGE_EMULATOR_HOST": self.url,
            "NGC_API_ENDPOINT": self.url,
            "NGC_AUTH_ENDPOINT": self.url,
            "NGC_API_KEY": "fixture-key",
            **extra,
        }


@contextmanager
def provider_fixture(state: FixtureState | None = None) -> Iterator[ProviderFixture]:
    """Serve ``state`` on a free loopback port for the duration of the block."""
    server = _Server(state or FixtureState())
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="provider-fixture", daemon=True
    )
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield ProviderFixture(url=f"http://{host!s}:{port}", state=server.state)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
