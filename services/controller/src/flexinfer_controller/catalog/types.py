"""Plain inputs and outputs of a catalog sync, independent of the ModelCatalog API type.

They mirror ``spec.registries[]``, ``spec.filter`` and ``status.entries[]`` of the
ModelCatalog resource, so that the resource can be mapped onto them (and back) in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flexinfer_controller.catalog.credentials import DockerConfig

TAGS_ANNOTATION = "flexinfer.ai/tags"
"""Manifest annotation listing a model's tags, comma-separated (``chat,llama,8b``)."""


@dataclass(frozen=True, slots=True)
class RegistrySource:
    """One OCI registry of ``spec.registries[]`` (type OCI).

    ``url`` is ``oci://host[:port][/prefix]`` (HTTPS) or ``http(s)://host[:port][/prefix]``;
    a prefix limits the catalog to repositories under it (a Harbor project, a GHCR
    repository). ``credentials`` is the parsed dockerconfigjson of ``secretRef``.
    ``repositories`` names repositories explicitly, for registries that cannot list them.
    ``adapter`` forces an adapter by name instead of detecting it from the host.
    """

    url: str
    credentials: DockerConfig | None = None
    repositories: tuple[str, ...] = ()
    adapter: str | None = None


@dataclass(frozen=True, slots=True)
class CatalogFilter:
    """``spec.filter``: a model must carry every tag, and its repository match the glob."""

    tags: tuple[str, ...] = ()
    name_pattern: str | None = None


@dataclass(frozen=True, slots=True)
class CatalogSpec:
    """The OCI part of a ModelCatalog's spec."""

    registries: tuple[RegistrySource, ...]
    filter: CatalogFilter = field(default_factory=CatalogFilter)


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One ``status.entries[]`` item: a model version found in a registry."""

    name: str
    """``<repository>:<tag>``."""
    registry: str
    """The ``url`` of the RegistrySource it was found in."""
    reference: str
    """``oci://host/repository:tag@sha256:...``: pinned to the digest it resolved to."""
    size: int
    """Bytes of every blob the manifest names (config and layers), children included."""
