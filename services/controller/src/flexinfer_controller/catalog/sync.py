"""``sync(spec) -> entries``: list every registry of a catalog, filter, resolve, size.

Filter semantics (``spec.filter``):

* ``namePattern`` is a glob (``fnmatch``, case-sensitive) over the repository name;
  ``*`` also matches ``/``, so ``models/*`` covers ``models/meta/llama``.
* ``tags``: a model must carry every listed tag. A model's tags are the comma-separated
  items of its manifest's ``flexinfer.ai/tags`` annotation; a filter tag written
  ``key=value`` instead requires the manifest annotation ``key`` to equal ``value`` (for
  ``org.opencontainers.image.*`` and the like). For an index, its own annotations count.
  Labels inside an image's config blob are not read (that would cost a blob download).

Every tag of every repository becomes one entry, except cosign's ``sha256-<hex>.sig``
style signature and attestation tags. Manifest requests run at most ``concurrency`` at a
time. A permanent failure of one manifest (a digest mismatch, a tag deleted meanwhile)
skips that entry and is reported; a failure to list a registry fails that registry.
"""

from __future__ import annotations

import asyncio
import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from flexinfer_common.errors import FlexInferError, PermanentError
from flexinfer_controller.catalog.adapter import AdapterRegistry, RegistryAdapter
from flexinfer_controller.catalog.adapters import default_adapters
from flexinfer_controller.catalog.client import ClientOptions
from flexinfer_controller.catalog.errors import InvalidReferenceError
from flexinfer_controller.catalog.manifest import Manifest
from flexinfer_controller.catalog.reference import OciReference, check_repository, check_tag
from flexinfer_controller.catalog.types import (
    TAGS_ANNOTATION,
    CatalogEntry,
    CatalogFilter,
    CatalogSpec,
    RegistrySource,
)

DEFAULT_CONCURRENCY = 8
_SIGNATURE_TAG = re.compile(r"sha(256|512)-[a-f0-9]+(\.[A-Za-z0-9]+)?")


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What a sync found, and what it could not read (by registry URL or reference)."""

    entries: tuple[CatalogEntry, ...] = ()
    failures: Mapping[str, FlexInferError] = field(default_factory=dict)


def model_tags(annotations: Mapping[str, str]) -> frozenset[str]:
    """The tags of a model: the items of its ``flexinfer.ai/tags`` annotation."""
    raw = annotations.get(TAGS_ANNOTATION, "")
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


def matches(flt: CatalogFilter, repository: str, annotations: Mapping[str, str] | None) -> bool:
    """Whether a repository (and, when given, its manifest's annotations) pass ``flt``."""
    if flt.name_pattern and not fnmatch.fnmatchcase(repository, flt.name_pattern):
        return False
    if annotations is None:
        return True
    tags = model_tags(annotations)
    for wanted in flt.tags:
        key, eq, value = wanted.partition("=")
        if not (annotations.get(key) == value if eq else wanted in tags):
            return False
    return True


async def sync(
    spec: CatalogSpec,
    *,
    adapters: AdapterRegistry | None = None,
    options: ClientOptions | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> list[CatalogEntry]:
    """Every entry of ``spec``; raises the first failure (see ``sync_report``)."""
    report = await sync_report(spec, adapters=adapters, options=options, concurrency=concurrency)
    for error in report.failures.values():
        raise error
    return list(report.entries)


async def sync_report(
    spec: CatalogSpec,
    *,
    adapters: AdapterRegistry | None = None,
    options: ClientOptions | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> SyncReport:
    """Entries of every registry that could be read, and the failures of the others."""
    run = _Sync(adapters or default_adapters(), options or ClientOptions(), spec.filter,
                asyncio.Semaphore(max(1, concurrency)))  # fmt: skip
    results = await asyncio.gather(
        *(run.registry(source) for source in spec.registries), return_exceptions=True
    )
    for source, result in zip(spec.registries, results, strict=True):
        if isinstance(result, FlexInferError):
            run.failures[source.url] = result
        elif isinstance(result, BaseException):
            raise result
        else:
            run.entries += result
    entries = sorted(run.entries, key=lambda e: (e.registry, e.name))
    return SyncReport(tuple(entries), dict(run.failures))


@dataclass
class _Sync:
    adapters: AdapterRegistry
    options: ClientOptions
    filter: CatalogFilter
    limit: asyncio.Semaphore
    entries: list[CatalogEntry] = field(default_factory=list)
    failures: dict[str, FlexInferError] = field(default_factory=dict)

    async def registry(self, source: RegistrySource) -> list[CatalogEntry]:
        async with self.limit:
            adapter = await self.adapters.open(source, self.options)
        try:
            async with self.limit:
                names = await adapter.list_repositories()
            names = [n for n in names if _valid(check_repository, n)]
            names = [n for n in names if matches(self.filter, n, None)]
            tag_lists = await asyncio.gather(*(self._tags(adapter, n) for n in names))
            found = await asyncio.gather(
                *(self._entry(adapter, source, name, tag)
                  for name, tags in zip(names, tag_lists, strict=True) for tag in tags)
            )  # fmt: skip
        finally:
            await adapter.aclose()
        return [entry for entry in found if entry is not None]

    async def _tags(self, adapter: RegistryAdapter, repository: str) -> list[str]:
        async with self.limit:
            tags = await adapter.client.tags(repository)
        return [t for t in tags if _valid(check_tag, t) and not _SIGNATURE_TAG.fullmatch(t)]

    async def _entry(
        self, adapter: RegistryAdapter, source: RegistrySource, repository: str, tag: str
    ) -> CatalogEntry | None:
        ref = OciReference(adapter.client.registry, repository, tag)
        try:
            async with self.limit:
                manifest = await adapter.client.manifest(repository, tag)
                if not matches(self.filter, repository, manifest.annotations):
                    return None
                size = await adapter.client.total_size(repository, manifest)
        except PermanentError as exc:
            self.failures[str(ref)] = exc
            return None
        return _entry(source, ref, manifest, size)


def _entry(
    source: RegistrySource, ref: OciReference, manifest: Manifest, size: int
) -> CatalogEntry:
    pinned = ref.with_digest(manifest.digest)
    return CatalogEntry(
        name=f"{ref.repository}:{ref.tag}", registry=source.url, reference=str(pinned), size=size
    )


def _valid(check: Callable[[str], str], value: str) -> bool:
    # Names come from the registry: one that breaks the grammar is skipped, never requested.
    try:
        check(value)
    except InvalidReferenceError:
        return False
    return True
