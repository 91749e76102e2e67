"""The RegistryAdapter interface, and adapters by name with detection from the host.

An adapter knows how one kind of registry lists its repositories and wants to be
authenticated; tags and manifests are the distribution API's everywhere, served by the
adapter's ``client``. Detection: host rules first (``ghcr.io`` -> ghcr, ECR hosts -> ecr),
then probes (Harbor answers ``/api/v2.0/systeminfo``), else the fallback (``generic``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from flexinfer_common.errors import ConfigError
from flexinfer_controller.catalog.client import ClientOptions, OciClient
from flexinfer_controller.catalog.reference import RegistryLocation, parse_registry_url
from flexinfer_controller.catalog.types import RegistrySource


class RegistryAdapter(Protocol):
    """One registry, opened for a sync: lists repositories; ``client`` reads the rest."""

    name: str
    client: OciClient

    async def list_repositories(self) -> list[str]:
        """The repositories this source covers (its URL prefix, or those it names)."""
        ...

    async def aclose(self) -> None:
        """Release the connections."""
        ...


AdapterFactory = Callable[[RegistrySource, RegistryLocation, ClientOptions], RegistryAdapter]
Probe = Callable[[RegistrySource, RegistryLocation, ClientOptions], Awaitable[bool]]


class AdapterRegistry:
    """Adapter factories by name, and the rules that pick one for a registry."""

    def __init__(
        self,
        factories: Mapping[str, AdapterFactory],
        *,
        host_rules: Sequence[tuple[str, str]] = (),
        probes: Sequence[tuple[str, Probe]] = (),
        fallback: str = "generic",
    ) -> None:
        unknown = {n for _, n in host_rules} | {n for n, _ in probes} | {fallback}
        if missing := unknown - set(factories):
            raise ConfigError(f"adapter rules name unknown adapters: {sorted(missing)}")
        self._factories = dict(factories)
        self._host_rules = [(re.compile(pattern), name) for pattern, name in host_rules]
        self._probes = list(probes)
        self._fallback = fallback

    def names(self) -> list[str]:
        """Every adapter name, sorted."""
        return sorted(self._factories)

    async def detect(
        self, source: RegistrySource, location: RegistryLocation, options: ClientOptions
    ) -> str:
        """The adapter name for ``location``: a host rule, else a probe, else the fallback."""
        for pattern, name in self._host_rules:
            if pattern.fullmatch(location.host):
                return name
        for name, probe in self._probes:
            if await probe(source, location, options):
                return name
        return self._fallback

    async def open(
        self, source: RegistrySource, options: ClientOptions | None = None
    ) -> RegistryAdapter:
        """The adapter for ``source``: the one it names, or the detected one."""
        options = options or ClientOptions()
        location = parse_registry_url(source.url)
        name = source.adapter or await self.detect(source, location, options)
        factory = self._factories.get(name)
        if factory is None:
            raise ConfigError(f"unknown registry adapter {name!r}; known: {self.names()}")
        return factory(source, location, options)
