"""The Backend interface and its registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_common.errors import PermanentError


class UnsupportedBackendError(PermanentError):
    """The backend is known but cannot run on this runtime (yet)."""


@dataclass(frozen=True, slots=True)
class LaunchContext:
    """What a backend may know about the runtime it launches on."""

    runtime: str
    engine_python: str
    host: str = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """A runtime-neutral description of one engine process."""

    argv: tuple[str, ...]
    """Command line, without the readiness flag (the runtime appends it)."""
    served_name: str
    ready_fd_flag: str = "--ready-fd"
    """Flag through which the engine is told which fd to write its ready line to."""
    env: Mapping[str, str] = field(default_factory=dict)
    health_path: str = "/readyz"
    """HTTP path answering 200 while the engine serves (used to verify adopted engines)."""


class Backend(ABC):
    """One inference engine family (reference, vllm, ollama, ...)."""

    name: str = ""
    aliases: tuple[str, ...] = ()

    @abstractmethod
    def launch(self, model: Model, model_dir: Path, ctx: LaunchContext) -> LaunchSpec:
        """The engine command for ``model``; UnsupportedBackendError if ``ctx.runtime`` can't."""


BackendFactory = Callable[[], Backend]


class BackendRegistry:
    """Backends by name and alias (case-insensitive, like the operator's backend.Get)."""

    def __init__(self, factories: Mapping[str, BackendFactory]) -> None:
        self._backends: dict[str, Backend] = {}
        self._names: list[str] = []
        for name, factory in factories.items():
            backend = factory()
            self._names.append(name)
            for key in (name, *backend.aliases):
                self._backends[key.lower()] = backend

    def get(self, name: str) -> Backend | None:
        """The backend called ``name`` (or one of its aliases), None if unknown."""
        return self._backends.get(name.strip().lower())

    def names(self) -> list[str]:
        """Canonical backend names, for error messages."""
        return sorted(self._names)
