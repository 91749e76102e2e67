"""Runtimes by name: a name->factory registry (``kubernetes`` arrives in a later issue)."""

from __future__ import annotations

from collections.abc import Callable

from flexinfer_common.errors import ConfigError
from flexinfer_controller.runtime.base import ReplicaListener, Runtime
from flexinfer_controller.settings import ControllerSettings

RuntimeFactory = Callable[[ControllerSettings, ReplicaListener], Runtime]


def _local(settings: ControllerSettings, listener: ReplicaListener) -> Runtime:
    from flexinfer_controller.runtime.local import LocalRuntime

    return LocalRuntime.from_settings(settings, listener)


def _factories() -> dict[str, RuntimeFactory]:
    return {"local": _local}


def runtime_names() -> list[str]:
    """Names ``ControllerSettings.runtime`` accepts."""
    return sorted(_factories())


def create_runtime(settings: ControllerSettings, listener: ReplicaListener) -> Runtime:
    """The runtime that ``settings.runtime`` names."""
    try:
        factory = _factories()[settings.runtime]
    except KeyError:
        known = ", ".join(runtime_names())
        raise ConfigError(f"runtime {settings.runtime!r} is not one of: {known}") from None
    return factory(settings, listener)
