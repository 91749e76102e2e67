"""The loaded LoRA adapters of one engine: names, limits, and where they may come from.

Loading from a path is denied unless the path lies inside one of the configured adapter
roots (after following symlinks): the load route is an admin route, but a path is still
a way to make the engine read files, so nothing outside the roots is ever opened.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from flexinfer_engine.core import peft
from flexinfer_engine.core.lora import (
    Adapter,
    LinearShape,
    LoRAError,
    LoRAInputError,
    LoRANotFoundError,
)

MAX_NAME_CHARS = 256
MAX_PATH_CHARS = 4096


@dataclass(frozen=True)
class LoRALimits:
    """What an engine accepts: vLLM's --max-loras and --max-lora-rank, and the roots."""

    max_loras: int = 1
    max_rank: int = 16
    roots: tuple[Path, ...] = ()


class AdapterRegistry:
    """Loaded adapters by name, in load order. Not thread-safe: the runner serialises
    loads and unloads; readers (requests) take an Adapter, which never changes."""

    def __init__(
        self,
        limits: LoRALimits,
        linears: Mapping[str, LinearShape],
        *,
        base_name: str,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.limits = limits
        self.linears = dict(linears)
        self.base_name = base_name
        self.device = device
        self.dtype = dtype
        self._roots = tuple(root.resolve() for root in limits.roots)
        self._loaded: dict[str, Adapter] = {}

    def get(self, name: str) -> Adapter | None:
        """The adapter called ``name``, None when none is."""
        return self._loaded.get(name)

    def loaded(self) -> list[Adapter]:
        """Every loaded adapter, oldest first."""
        return list(self._loaded.values())

    def check_load(self, name: str, path: str, *, replace: bool = False) -> None:
        """Refuse a load before anything is read: bad or taken name, no room."""
        if not name or not path:
            raise LoRAInputError("Both 'lora_name' and 'lora_path' must be provided.")
        _check_text("lora_name", name, MAX_NAME_CHARS)
        _check_text("lora_path", path, MAX_PATH_CHARS)
        if name == self.base_name:
            raise LoRAInputError(f"'{name}' is the base model's name, not an adapter name.")
        if name in self._loaded:
            if replace:
                return
            raise LoRAInputError(f"The lora adapter '{name}' has already been loaded.")
        if len(self._loaded) >= self.limits.max_loras:
            raise LoRAError(
                f"Cannot load LoRA adapter '{name}': {len(self._loaded)} adapters are loaded, "
                f"the engine's maximum (--max-loras {self.limits.max_loras}); unload one first."
            )

    def read(self, name: str, path: str) -> Adapter:
        """Read and validate the adapter at ``path`` (slow: run it in a worker thread)."""
        try:
            return self._read(name, path)
        except OSError as exc:
            raise LoRAError(f"Cannot read LoRA adapter '{name}' at {path}: {exc}") from exc

    def _read(self, name: str, path: str) -> Adapter:
        directory = self._inside_roots(name, path)
        config_file = self._inside_roots(name, str(directory / peft.CONFIG_FILE))
        if not directory.is_dir() or not config_file.is_file():
            raise LoRANotFoundError(f"Loading lora {name} failed: No adapter found for {path}")
        config = peft.read_config(config_file, self.limits.max_rank)
        weights = self._inside_roots(name, str(directory / peft.WEIGHTS_FILE))
        if not weights.is_file():
            raise LoRAError(f"{path} has no {peft.WEIGHTS_FILE} (pickled weights are not read)")
        pairs = peft.read_pairs(weights, config, self.linears, self.device, self.dtype)
        return Adapter(name, path, config.rank, config.scale, pairs, int(time.time()))

    def _inside_roots(self, name: str, path: str) -> Path:
        if not self._roots:
            raise LoRAError(
                f"Cannot load LoRA adapter '{name}': loading adapters from paths is disabled "
                "because no adapter roots are configured (--lora-root or "
                "FLEXINFER_ENGINE_LORA_ROOTS)."
            )
        given = Path(path)
        if not given.is_absolute():
            raise LoRAError(f"lora_path must be an absolute path, not {path!r}.")
        resolved = given.resolve()  # follows symlinks: a link out of a root stays out
        if not any(resolved.is_relative_to(root) for root in self._roots):
            raise LoRAError(
                f"Cannot load LoRA adapter '{name}': {path} is outside the engine's adapter "
                f"roots ({', '.join(str(r) for r in self._roots)})."
            )
        return resolved

    def add(self, adapter: Adapter) -> None:
        """Register a read adapter (replacing one of the same name)."""
        self._loaded[adapter.name] = adapter

    def remove(self, name: str) -> Adapter:
        """Forget ``name``; requests already running with it finish with it."""
        if not name:
            raise LoRAInputError("'lora_name' needs to be provided to unload a LoRA adapter.")
        adapter = self._loaded.pop(name, None)
        if adapter is None:
            raise LoRANotFoundError(f"The lora adapter '{name}' cannot be found.")
        return adapter

    def move(self, device: torch.device) -> None:
        """Put every adapter's tensors on ``device`` (the host while the engine sleeps)."""
        self.device = device
        self._loaded = {name: a.to(device) for name, a in self._loaded.items()}


def _check_text(field: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise LoRAInputError(f"{field} is longer than {limit} characters.")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise LoRAInputError(f"{field} must not contain control characters.")
