"""Runtimes by name: a name->plugin registry (``kubernetes`` arrives in a later issue).

A plugin gives the runtime and its pre-start step: local mode copies a model to tmpfs
before it spawns the engine, where a Kubernetes Deployment does it in an init container.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

from flexinfer_common.errors import ConfigError
from flexinfer_controller.core.gpu import DeclaredInventory, GPUInventory, NodeGPU, parse_vram_mb
from flexinfer_controller.core.prestart import PreStart
from flexinfer_controller.runtime.base import ReplicaListener, Runtime
from flexinfer_controller.settings import ControllerSettings

RuntimeFactory = Callable[[ControllerSettings, ReplicaListener], Runtime]
PreStartFactory = Callable[[ControllerSettings], PreStart]
InventoryFactory = Callable[[ControllerSettings], GPUInventory]


@dataclass(frozen=True, slots=True)
class RuntimePlugin:
    """How one runtime is built, with the step that runs before each engine starts."""

    runtime: RuntimeFactory
    prestart: PreStartFactory
    inventory: InventoryFactory
    """Where detectGPU learns the fleet's accelerators."""


def _local(settings: ControllerSettings, listener: ReplicaListener) -> Runtime:
    from flexinfer_controller.runtime.local import LocalRuntime

    return LocalRuntime.from_settings(settings, listener)


def _flash_loader(settings: ControllerSettings) -> PreStart:
    from flexinfer_controller.flashload.prestart import FlashLoadPreStart

    return FlashLoadPreStart(settings.flash_loader)


def _declared(settings: ControllerSettings) -> GPUInventory:
    host = socket.gethostname().split(".")[0] or "localhost"
    return DeclaredInventory(
        [
            NodeGPU(
                node=gpu.node or host,
                vendor=gpu.vendor,
                count=gpu.count,
                arch=gpu.arch,
                vram_mb=parse_vram_mb(gpu.vram) if gpu.vram else None,
            )
            for gpu in settings.gpus
        ]
    )


def _plugins() -> dict[str, RuntimePlugin]:
    return {"local": RuntimePlugin(_local, _flash_loader, _declared)}


def runtime_names() -> list[str]:
    """Names ``ControllerSettings.runtime`` accepts."""
    return sorted(_plugins())


def _plugin(settings: ControllerSettings) -> RuntimePlugin:
    try:
        return _plugins()[settings.runtime]
    except KeyError:
        known = ", ".join(runtime_names())
        raise ConfigError(f"runtime {settings.runtime!r} is not one of: {known}") from None


def create_runtime(settings: ControllerSettings, listener: ReplicaListener) -> Runtime:
    """The runtime that ``settings.runtime`` names."""
    return _plugin(settings).runtime(settings, listener)


def create_prestart(settings: ControllerSettings) -> PreStart:
    """The pre-start step of the runtime that ``settings.runtime`` names."""
    return _plugin(settings).prestart(settings)


def create_inventory(settings: ControllerSettings) -> GPUInventory:
    """The GPU inventory of the runtime that ``settings.runtime`` names."""
    return _plugin(settings).inventory(settings)
