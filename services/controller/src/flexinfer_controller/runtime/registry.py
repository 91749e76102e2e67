"""Runtimes by name: a name->plugin registry (``kubernetes`` arrives in a later issue).

A plugin gives the runtime and its pre-start step: local mode copies a model to tmpfs
before it spawns the engine, where a Kubernetes Deployment does it in an init container.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flexinfer_common.errors import ConfigError
from flexinfer_controller.core.prestart import PreStart
from flexinfer_controller.runtime.base import ReplicaListener, Runtime
from flexinfer_controller.settings import ControllerSettings

RuntimeFactory = Callable[[ControllerSettings, ReplicaListener], Runtime]
PreStartFactory = Callable[[ControllerSettings], PreStart]


@dataclass(frozen=True, slots=True)
class RuntimePlugin:
    """How one runtime is built, with the step that runs before each engine starts."""

    runtime: RuntimeFactory
    prestart: PreStartFactory


def _local(settings: ControllerSettings, listener: ReplicaListener) -> Runtime:
    from flexinfer_controller.runtime.local import LocalRuntime

    return LocalRuntime.from_settings(settings, listener)


def _flash_loader(settings: ControllerSettings) -> PreStart:
    from flexinfer_controller.flashload.prestart import FlashLoadPreStart

    return FlashLoadPreStart(settings.flash_loader)


def _plugins() -> dict[str, RuntimePlugin]:
    return {"local": RuntimePlugin(_local, _flash_loader)}


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
