"""``--static NAME=URL``: the proxy alone, its models and endpoints declared on the command line.

The app is the same one the full stack serves (same handler, forwarder, catalog and endpoint
table); only its backing changes: a read-only store holding the declared models and their
endpoints, and an in-process bus. No controller, bus server or database is needed, which
is what quick use and benchmarks want.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from flexinfer_common.api import Model, ModelSpec, ModelStatus, ObjectMeta
from flexinfer_common.api.model import LiteLLMSpec
from flexinfer_common.errors import ConflictError, InvalidSpecError, NotFoundError
from flexinfer_common.store import EndpointRecord, ModelStore
from flexinfer_proxy.core.catalog import UPSTREAM_MODEL_ANNOTATION

_NAME_CHARS = re.compile(r"[^a-z0-9-]+")
_MAX_NAME = 1024


@dataclass(frozen=True, slots=True)
class StaticEndpoint:
    """One ``--static NAME=URL[#served-name]`` declaration: a model name, its base URL (no
    /v1), and the name that server expects in requests, when the declaration gives it."""

    name: str
    url: str
    served: str | None = None


def parse_static(value: str) -> StaticEndpoint:
    """Parse ``NAME=URL[#served-name]``; InvalidSpecError with a readable message when
    it is malformed."""
    name, sep, url = value.partition("=")
    url, _, served = url.partition("#")
    name = name.strip()
    url = url.strip()
    served = served.strip()
    if not sep or not name or not url:
        raise InvalidSpecError(f"--static {value!r}: expected NAME=URL or NAME=URL#served-name")
    if served and (len(served) > _MAX_NAME or not served.isprintable()):
        raise InvalidSpecError(f"--static {value!r}: the served name must be printable text")
    if len(name) > _MAX_NAME or not name.isprintable():
        raise InvalidSpecError(f"--static {value!r}: the model name must be printable text")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidSpecError(f"--static {value!r}: URL must be http(s)://host[:port][/v1]")
    if parts.query:
        raise InvalidSpecError(f"--static {value!r}: URL must not have a query")
    base = url.rstrip("/")
    # Clients and SDKs write the OpenAI base URL with /v1; the proxy forwards /v1/... itself.
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return StaticEndpoint(name=name, url=base, served=served or None)


def object_name(name: str) -> str:
    """A valid Model object name for any served name (kept readable, made unique)."""
    slug = _NAME_CHARS.sub("-", name.lower()).strip("-")[:40].strip("-") or "model"
    if slug == name:
        return slug
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def static_models(declared: list[StaticEndpoint], namespace: str) -> list[Model]:
    """One external Model per distinct name, served by every URL declared for it.

    The proxy asks each URL's /v1/models what it serves and sends that name, unless the
    declaration names it (``#served-name``).
    """
    now = datetime.now(UTC)
    by_name: dict[str, list[StaticEndpoint]] = {}
    for item in declared:
        by_name.setdefault(item.name, []).append(item)
    models = []
    for name, items in by_name.items():
        served = next((i.served for i in items if i.served), None)
        annotations = {UPSTREAM_MODEL_ANNOTATION: served} if served else {}
        meta = ObjectMeta(
            name=object_name(name),
            namespace=namespace,
            creation_timestamp=now,
            annotations=annotations,
        )
        spec = ModelSpec(
            backend="external",
            source=items[0].url,
            endpoints=list(dict.fromkeys(i.url for i in items)),
            litellm=LiteLLMSpec(served_model_name=name),
        )
        models.append(Model(metadata=meta, spec=spec))
    return models


class StaticStore(ModelStore):
    """A read-only store of declared models and endpoints: writes are refused."""

    def __init__(self, models: list[Model]) -> None:
        self._models = {m.key: m for m in models}

    @classmethod
    def from_declarations(cls, declared: list[StaticEndpoint], namespace: str) -> StaticStore:
        """The store for ``--static`` declarations in ``namespace``."""
        return cls(static_models(declared, namespace))

    async def create_model(self, model: Model) -> Model:
        """Refused: static models come from the command line."""
        raise ConflictError("static models are read-only")

    async def get_model(self, namespace: str, name: str) -> Model:
        """The declared Model, or NotFoundError."""
        model = self._models.get(f"{namespace}/{name}")
        if model is None:
            raise NotFoundError(f"model {namespace}/{name} not found")
        return model

    async def list_models(self, namespace: str | None = None) -> list[Model]:
        """Declared Models, ordered by key."""
        models = sorted(self._models.values(), key=lambda m: m.key)
        return [m for m in models if namespace is None or m.metadata.namespace == namespace]

    async def replace_model(self, model: Model) -> Model:
        """Refused: static models come from the command line."""
        raise ConflictError("static models are read-only")

    async def update_status(
        self, namespace: str, name: str, status: ModelStatus, resource_version: str | None = None
    ) -> Model:
        """Refused: static models have no controller writing their status."""
        raise ConflictError("static models are read-only")

    async def delete_model(self, namespace: str, name: str) -> None:
        """Refused: static models come from the command line."""
        raise ConflictError("static models are read-only")

    async def put_endpoint(self, record: EndpointRecord) -> None:
        """Refused: static endpoints come from the command line."""
        raise ConflictError("static endpoints are read-only")

    async def delete_endpoint(self, model: str, replica: str) -> None:
        """Refused: static endpoints come from the command line."""
        raise ConflictError("static endpoints are read-only")

    async def list_endpoints(self, model: str | None = None) -> list[EndpointRecord]:
        """None: static models are external, their URLs are in their spec."""
        return []

    async def close(self) -> None:
        """Nothing to release."""
