"""Try the sources in order; the first that reports a GPU describes the node.

The order (``FLEXINFER_AGENT_DISCOVERY_SOURCES``) puts a vendor's library before its tool and
every vendor tool before sysfs, which knows the least. A source that fails (missing tool,
non-zero exit, timeout, unreadable output) is recorded with its reason and the next one is
tried: discovery never raises. A node where no source finds anything has no GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from flexinfer_agent.core.commands import DiscoveryError
from flexinfer_agent.core.gpu import GPU
from flexinfer_agent.core.sources.base import GPUSource, SourceFactory
from flexinfer_agent.core.sources.drm import drm_source
from flexinfer_agent.core.sources.nvidia_smi import nvidia_smi_source
from flexinfer_agent.core.sources.nvml import nvml_source
from flexinfer_agent.core.sources.rocm_smi import rocm_smi_source
from flexinfer_agent.core.sources.system_profiler import system_profiler_source
from flexinfer_agent.core.sources.xpu_smi import xpu_smi_source
from flexinfer_agent.settings import DiscoverySettings
from flexinfer_common.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SourceError:
    """One source that could not answer, and why."""

    source: str
    reason: str
    """``missing``, ``failed``, ``timeout`` or ``bad-output``: the metric's label."""
    message: str


@dataclass(frozen=True, slots=True)
class Inventory:
    """What one discovery found: the GPUs, the source that found them, the failures."""

    gpus: list[GPU]
    source: str | None
    errors: list[SourceError] = field(default_factory=list)


class SourceRegistry:
    """Source name → factory; ``build`` makes the sources a setting names, in its order."""

    def __init__(self, factories: dict[str, SourceFactory] | None = None) -> None:
        self._factories = dict(factories or {})

    def register(self, name: str, factory: SourceFactory) -> None:
        """Add or replace the factory for ``name``."""
        self._factories[name] = factory

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._factories)

    def build(
        self, names: Iterable[str], settings: DiscoverySettings
    ) -> list[tuple[str, GPUSource]]:
        """The named sources, in order; ConfigError naming an unknown one."""
        unknown = [name for name in names if name not in self._factories]
        if unknown:
            known = ", ".join(self.names())
            raise ConfigError(
                f"FLEXINFER_AGENT_DISCOVERY_SOURCES: unknown source {unknown[0]!r}; known: {known}"
            )
        return [(name, self._factories[name](settings)) for name in names]


def builtin_sources() -> SourceRegistry:
    """Every source this agent ships."""
    return SourceRegistry(
        {
            "nvml": nvml_source,
            "nvidia-smi": nvidia_smi_source,
            "rocm-smi": rocm_smi_source,
            "xpu-smi": xpu_smi_source,
            "system-profiler": system_profiler_source,
            "drm": drm_source,
        }
    )


class Discovery:
    """Runs the sources in order; logs a source's failure when it starts or changes."""

    def __init__(self, sources: list[tuple[str, GPUSource]]) -> None:
        self._sources = sources
        self._last: dict[str, str | None] = {}

    @classmethod
    def from_settings(
        cls, settings: DiscoverySettings, registry: SourceRegistry | None = None
    ) -> Discovery:
        """The sources ``settings.sources`` names, from ``registry`` (default: the builtins)."""
        return cls((registry or builtin_sources()).build(settings.sources, settings))

    async def run(self) -> Inventory:
        """The first source's GPUs that found any; every failure on the way recorded."""
        errors: list[SourceError] = []
        for name, source in self._sources:
            try:
                gpus = await source.discover()
            except DiscoveryError as exc:
                errors.append(SourceError(name, exc.reason, str(exc)))
                self._note(name, exc.reason, str(exc))
                continue
            self._note(name, None, "")
            if gpus:
                return Inventory(gpus, name, errors)
        return Inventory([], None, errors)

    def _note(self, name: str, reason: str | None, message: str) -> None:
        # Once per change, not every heartbeat: a node without rocm-smi stays without it.
        if self._last.get(name, "") != reason:
            if reason is not None:
                log.warning("GPU discovery: %s unavailable (%s): %s", name, reason, message)
            self._last[name] = reason
