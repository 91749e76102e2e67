"""Resolve one ``oci://`` reference to its digest and size, through the right adapter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from flexinfer_controller.catalog.adapter import AdapterRegistry
from flexinfer_controller.catalog.adapters import default_adapters
from flexinfer_controller.catalog.client import ClientOptions
from flexinfer_controller.catalog.credentials import DockerConfig
from flexinfer_controller.catalog.reference import OciReference, parse_reference
from flexinfer_controller.catalog.types import RegistrySource


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A reference pinned to the digest it resolved to, with what its manifest says."""

    reference: OciReference
    media_type: str
    size: int
    annotations: Mapping[str, str] = field(default_factory=dict)


async def resolve(
    reference: str,
    *,
    credentials: DockerConfig | None = None,
    adapters: AdapterRegistry | None = None,
    options: ClientOptions | None = None,
    plain_http: bool = False,
    adapter: str | None = None,
) -> ResolvedModel:
    """Parse ``reference``, fetch and verify its manifest; the digest-pinned reference."""
    ref = parse_reference(reference)
    scheme = "http" if plain_http else "oci"
    source = RegistrySource(f"{scheme}://{ref.registry}", credentials, adapter=adapter)
    opened = await (adapters or default_adapters()).open(source, options)
    try:
        manifest = await opened.client.manifest(ref.repository, ref.reference)
        size = await opened.client.total_size(ref.repository, manifest)
    finally:
        await opened.aclose()
    return ResolvedModel(
        reference=ref.with_digest(manifest.digest),
        media_type=manifest.media_type,
        size=size,
        annotations=manifest.annotations,
    )
