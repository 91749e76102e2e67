"""Name -> factory registry of loader strategies, and the chain built from names."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from flexinfer_common.errors import ConfigError
from flexinfer_transfer.chain import LoaderChain
from flexinfer_transfer.loader import WeightLoader
from flexinfer_transfer.safetensors_loader import SafetensorsLoader

LoaderFactory = Callable[[], WeightLoader]


def default_loaders() -> dict[str, LoaderFactory]:
    """The strategies this package ships, by name (a fresh dict: callers may extend it)."""
    return {SafetensorsLoader.name: SafetensorsLoader}


def create_loader_chain(
    names: Sequence[str], registry: Mapping[str, LoaderFactory] | None = None
) -> LoaderChain:
    """A chain of the named strategies, in the given order."""
    factories = default_loaders() if registry is None else registry
    if not names:
        raise ConfigError("the loader chain needs at least one strategy name")
    unknown = [name for name in names if name not in factories]
    if unknown:
        known = ", ".join(sorted(factories))
        raise ConfigError(f"unknown loader strategy {unknown[0]!r} (known: {known})")
    return LoaderChain([factories[name]() for name in names])
