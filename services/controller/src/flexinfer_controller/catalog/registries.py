"""A ModelCatalog's ``spec.registries[]``, synced one registry at a time.

Each registry gets its own result: a registry that cannot be read (a refused secret, an
unreachable host, a type we cannot list) fails alone, and a slow one is cut off at
``timeout_s`` without holding up the others' entries.

HuggingFace and Ollama registries are reported, not listed: the spec gives a Hugging Face
registry no organisation, search or filter to list by (the Hub holds over a million
models), and Ollama's library has no documented list API (a local Ollama's ``/api/tags``
lists what that one server pulled, not a registry). They fail with
``RegistryTypeNotSupported`` while the catalog's OCI registries sync.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from flexinfer_common.api.catalog import CatalogFilter as ApiFilter
from flexinfer_common.api.catalog import ModelCatalog, RegistryType
from flexinfer_common.api.catalog import RegistrySource as ApiRegistry
from flexinfer_common.errors import (
    ConfigError,
    FlexInferError,
    NotFoundError,
    PermanentError,
)
from flexinfer_controller.catalog.client import ClientOptions
from flexinfer_controller.catalog.credentials import DockerConfig, parse_dockerconfigjson
from flexinfer_controller.catalog.errors import RegistryUnavailableError
from flexinfer_controller.catalog.secrets import SecretSource, check_secret_name
from flexinfer_controller.catalog.sync import sync_report
from flexinfer_controller.catalog.types import CatalogEntry, CatalogFilter, CatalogSpec
from flexinfer_controller.catalog.types import RegistrySource as SyncSource

DOCKERCONFIG_KEY = ".dockerconfigjson"


class UnsupportedRegistryError(PermanentError):
    """A registry type this controller cannot list."""

    def __init__(self, kind: RegistryType) -> None:
        super().__init__(
            f"registry type {kind.value} is not supported: only OCI registries are listed"
            " (a HuggingFace registry names nothing to list by, Ollama has no list API)"
        )


class RegistrySecretError(PermanentError):
    """The registry's secretRef names a Secret that is absent or unusable."""


@dataclass(frozen=True, slots=True)
class SyncOptions:
    """How registries are read: client options, the per-registry time limit, request bound."""

    client: ClientOptions = field(default_factory=ClientOptions)
    timeout_s: float = 300.0
    concurrency: int = 8


@dataclass(frozen=True, slots=True)
class RegistryResult:
    """What one registry of a catalog gave: entries, or the error that stopped it."""

    label: str
    """The registry as the spec names it: its ``url``, or its type when it has none."""
    entries: tuple[CatalogEntry, ...] = ()
    error: FlexInferError | None = None
    skipped: dict[str, FlexInferError] = field(default_factory=dict)
    """Entries that could not be read (a tampered manifest), by reference."""


def registry_label(registry: ApiRegistry) -> str:
    """How status names a registry: its url, or its type (HuggingFace, Ollama)."""
    return registry.url or registry.type.value


def oci_url(url: str) -> str:
    """``url`` with a scheme: FlexInfer manifests write OCI registries as bare ``host/path``."""
    return url if "://" in url else f"oci://{url}"


def sync_filter(flt: ApiFilter | None) -> CatalogFilter:
    """``spec.filter`` as the sync takes it."""
    if flt is None:
        return CatalogFilter()
    return CatalogFilter(tags=tuple(flt.tags or ()), name_pattern=flt.name_pattern)


async def sync_catalog(
    catalog: ModelCatalog, secrets: SecretSource, options: SyncOptions
) -> list[RegistryResult]:
    """One result per ``spec.registries[]`` entry, in spec order; registries run concurrently."""
    namespace = catalog.metadata.namespace
    flt = sync_filter(catalog.spec.filter)
    return list(
        await asyncio.gather(
            *(_one(namespace, r, flt, secrets, options) for r in catalog.spec.registries)
        )
    )


async def _one(
    namespace: str,
    registry: ApiRegistry,
    flt: CatalogFilter,
    secrets: SecretSource,
    options: SyncOptions,
) -> RegistryResult:
    label = registry_label(registry)
    try:
        source = await _source(namespace, registry, secrets)
        return await _listed(label, source, flt, options)
    except FlexInferError as exc:
        return RegistryResult(label, error=exc)


async def _source(namespace: str, registry: ApiRegistry, secrets: SecretSource) -> SyncSource:
    if registry.type is not RegistryType.OCI or not registry.url:
        raise UnsupportedRegistryError(registry.type)
    credentials = None
    if registry.secret_ref:
        credentials = await _credentials(namespace, registry.secret_ref, secrets)
    return SyncSource(oci_url(registry.url), credentials=credentials)


async def _credentials(namespace: str, name: str, secrets: SecretSource) -> DockerConfig:
    where = f"secret {namespace}/{name}"
    try:
        data = await secrets.read(namespace, check_secret_name(name))
        raw = data.get(DOCKERCONFIG_KEY)
        if raw is None:
            raise ConfigError(f"has no {DOCKERCONFIG_KEY} key (a dockerconfigjson Secret)")
        return parse_dockerconfigjson(raw)
    except NotFoundError as exc:
        raise RegistrySecretError(f"{where} not found: {exc}") from exc
    except ConfigError as exc:
        raise RegistrySecretError(f"{where}: {exc}") from exc


async def _listed(
    label: str, source: SyncSource, flt: CatalogFilter, options: SyncOptions
) -> RegistryResult:
    spec = CatalogSpec((source,), flt)
    run = sync_report(spec, options=options.client, concurrency=options.concurrency)
    try:
        report = await asyncio.wait_for(run, options.timeout_s)
    except TimeoutError as exc:
        raise RegistryUnavailableError(
            source.url, f"listing took longer than {options.timeout_s:g}s"
        ) from exc
    failures = dict(report.failures)
    if (error := failures.pop(source.url, None)) is not None:
        return RegistryResult(label, error=error)
    # Entries name the registry as the spec wrote it, so a reader can match them up.
    entries = tuple(_relabel(e, label) for e in report.entries)
    return RegistryResult(label, entries, skipped=failures)


def _relabel(entry: CatalogEntry, label: str) -> CatalogEntry:
    return CatalogEntry(entry.name, label, entry.reference, entry.size)
