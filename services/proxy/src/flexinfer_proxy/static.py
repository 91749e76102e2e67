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

_NAME_CHARS = re.compile(r"[^a-z0-9-]+")
_MAX_NAME = 1024


@dataclass(frozen=True, slots=True)
class StaticEndpoint:
    """One ``--static NAME=URL`` declaration: a model name and its base URL (no /v1)."""

    name: str
    url: str


def parse_static(value: str) -> StaticEndpoint:
    """Parse ``NAME=URL``; InvalidSpecError with a readable message when it is malformed."""
    name, sep, url = value.partition("=")
    name = name.strip()
    url = url.strip()
    if not sep or not name or not url:
        raise InvalidSpecError(f"--static {value!r}: expected NAME=URL")
    if len(name) > _MAX_NAME or not name.isprintable():
        raise InvalidSpecError(f"--static {value!r}: the model name must be printable text")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidSpecError(f"--static {value!r}: URL must be http(s)://host[:port][/v1]")
    if parts.query or parts.fragment:
        raise InvalidSpecError(f"--static {value!r}: URL must not have a query or fragment")
    base = url.rstrip("/")
    # Clients and SDKs write the OpenAI base URL with /v1; the proxy forwards /v1/... itself.
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return StaticEndpoint(name=name, url=base)


def object_name(name: str) -> str:
    """A valid Model object name for any served name (kept readable, made unique)."""
    slug = _NAME_CHARS.sub("-", name.lower()).strip("-")[:40].strip("-") or "model"
    if slug == name:
        return slug
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def static_models(
    declared: list[StaticEndpoint], namespace: str
) -> tuple[list[Model], list[EndpointRecord]]:
    """One Model per distinct name, with one ready endpoint per URL declared for it."""
    now = datetime.now(UTC)
    models: dict[str, Model] = {}
    records: list[EndpointRecord] = []
    for index, item in enumerate(declared):
        model = models.get(item.name)
        if model is None:
            model = Model(
                metadata=ObjectMeta(
                    name=object_name(item.name), namespace=namespace, creation_timestamp=now
                ),
                spec=ModelSpec(
                    backend="external",
                    source=item.url,
                    litellm=LiteLLMSpec(served_model_name=item.name),
                ),
            )
            models[item.name] = model
        records.append(
            EndpointRecord(
                model=model.key,
                replica=f"static-{index}",
                url=item.url,
                ready=True,
                node=None,
                updated_at=now,
            )
        )
    return list(models.values()), records


class StaticStore(ModelStore):
    """A read-only store of declared models and endpoints: writes are refused."""

    def __init__(self, models: list[Model], endpoints: list[EndpointRecord]) -> None:
        self._models = {m.key: m for m in models}
        self._endpoints = list(endpoints)

    @classmethod
    def from_declarations(cls, declared: list[StaticEndpoint], namespace: str) -> StaticStore:
        """The store for ``--static`` declarations in ``namespace``."""
        return cls(*static_models(declared, namespace))

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
        """Declared endpoints, of one model or all."""
        return [r for r in self._endpoints if model is None or r.model == model]

    async def close(self) -> None:
        """Nothing to release."""
