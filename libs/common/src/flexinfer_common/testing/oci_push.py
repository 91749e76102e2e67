"""Push model artifacts into a registry over the distribution API, for tests.

Shared by the controller's catalog tests and the registry's OCI provider tests; it
speaks the API itself (httpx, a minimal challenge parser) so it imports neither.

A model is pushed as OCI artifacts are: safetensors-like blobs (an 8-byte little-endian
header length, a JSON header, zeroed tensor data) uploaded with POST+PUT, then an OCI
image manifest with ``artifactType`` and the empty config (or an OCI artifact manifest
naming ``blobs``), annotated like a model (``flexinfer.ai/tags``, ``org.opencontainers``).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_ARTIFACT = "application/vnd.oci.artifact.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
TITLE = "org.opencontainers.image.title"
"""The layer annotation ORAS names a pushed file by."""
MODEL_ARTIFACT_TYPE = "application/vnd.flexinfer.model.v1"
SAFETENSORS_MEDIA_TYPE = "application/vnd.flexinfer.model.layer.v1.safetensors"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
_DTYPE_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "I8": 1}


def safetensors_bytes(tensors: Mapping[str, tuple[int, ...]], dtype: str = "F16") -> bytes:
    """A valid safetensors file of zeroed tensors with the given shapes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        size = count * _DTYPE_BYTES[dtype]
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(encoded)) + encoded + bytes(offset)


def digest_of(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class ModelPusher:
    """Pushes to the registry at ``url`` as ``user`` (Basic, or a token got with Basic)."""

    url: str
    user: str | None = None
    password: str | None = None
    _tokens: dict[str, str] = field(default_factory=dict)

    async def push_model(
        self,
        repository: str,
        tag: str,
        files: Mapping[str, bytes],
        annotations: Mapping[str, str] | None = None,
        *,
        artifact_manifest: bool = False,
    ) -> str:
        """Push ``files`` as layers and a model manifest tagged ``tag``; its digest."""
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as http:
            layers = [
                {**await self._blob(http, repository, data), "mediaType": SAFETENSORS_MEDIA_TYPE,
                 "annotations": {TITLE: name}}
                for name, data in files.items()
            ]  # fmt: skip
            doc: dict[str, Any] = {"schemaVersion": 2, "artifactType": MODEL_ARTIFACT_TYPE}
            if artifact_manifest:
                doc |= {"mediaType": OCI_ARTIFACT, "blobs": layers}
            else:
                config = await self._blob(http, repository, EMPTY_CONFIG)
                doc |= {
                    "mediaType": OCI_MANIFEST,
                    "config": {**config, "mediaType": EMPTY_MEDIA_TYPE},
                }
                doc["layers"] = layers
            if annotations:
                doc["annotations"] = dict(annotations)
            return await self._manifest(http, repository, tag, doc)

    async def push_blob(self, repository: str, data: bytes) -> dict[str, Any]:
        """Upload one blob; its descriptor's ``digest`` and ``size``."""
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as http:
            return await self._blob(http, repository, data)

    async def push_manifest(self, repository: str, tag: str, doc: Mapping[str, Any]) -> str:
        """Push ``doc`` as it is (any media type, any annotations) tagged ``tag``; its digest."""
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as http:
            return await self._manifest(http, repository, tag, dict(doc))

    async def push_index(
        self, repository: str, tag: str, children: Mapping[str, int], annotations: Mapping[str, str]
    ) -> str:
        """Push an OCI index of already-pushed manifests (digest -> manifest size)."""
        doc = {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": d, "size": n} for d, n in children.items()
            ],
            "annotations": dict(annotations),
        }
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as http:
            return await self._manifest(http, repository, tag, doc)

    async def _blob(self, http: httpx.AsyncClient, repository: str, data: bytes) -> dict[str, Any]:
        digest = digest_of(data)
        opened = await self._send(http, "POST", f"/v2/{repository}/blobs/uploads/", repository)
        assert opened.status_code == 202, opened.text
        location = opened.headers["location"]
        done = await self._send(
            http, "PUT", location, repository, params={"digest": digest}, content=data,
            headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip
        assert done.status_code == 201, done.text
        return {"digest": digest, "size": len(data)}

    async def _manifest(
        self, http: httpx.AsyncClient, repository: str, tag: str, doc: dict[str, Any]
    ) -> str:
        body = json.dumps(doc, indent=1).encode()
        response = await self._send(
            http, "PUT", f"/v2/{repository}/manifests/{tag}", repository, content=body,
            headers={"Content-Type": doc["mediaType"]},
        )  # fmt: skip
        assert response.status_code == 201, response.text
        assert response.headers["docker-content-digest"] == digest_of(body)
        return digest_of(body)

    async def _send(
        self, http: httpx.AsyncClient, method: str, url: str, repository: str, **kwargs: Any
    ) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        for _ in range(2):
            if repository in self._tokens:
                headers["Authorization"] = f"Bearer {self._tokens[repository]}"
            auth = (self.user, self.password or "") if self.user else None
            use_basic = auth is not None and repository not in self._tokens
            response = await http.request(
                method, url, headers=headers, auth=auth if use_basic else None, **kwargs
            )
            challenge = _bearer_params(response.headers.get("www-authenticate", ""))
            if response.status_code != 401 or challenge is None:
                return response
            token = await http.get(
                challenge.get("realm", ""),
                params={"service": challenge.get("service", ""),
                        "scope": f"repository:{repository}:pull,push"},
                auth=auth,
            )  # fmt: skip
            self._tokens[repository] = token.json()["token"]
        return response


def _bearer_params(header: str) -> dict[str, str] | None:
    """The parameters of a ``Bearer k="v",...`` challenge (None for any other scheme).

    Deliberately simple: it reads only what :mod:`.oci_registry` sends, and stays apart from
    the parsers under test."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return {k.lower(): v for k, v in re.findall(r'([A-Za-z]+)="([^"]*)"', rest)}
