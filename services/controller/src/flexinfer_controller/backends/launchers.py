"""Which runtime launches a backend's engine how: a runtime name -> launcher registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_controller.backends.base import Backend, UnsupportedBackendError
from flexinfer_controller.backends.launch import LaunchContext, LaunchSpec
from flexinfer_controller.backends.local import launch_locally

Launcher = Callable[[Backend, Model, "Path | None", LaunchContext], LaunchSpec]


def _kubernetes(
    backend: Backend, model: Model, model_dir: Path | None, ctx: LaunchContext
) -> LaunchSpec:
    from flexinfer_controller.runtime.kubernetes.launch import launch_on_kubernetes

    return launch_on_kubernetes(backend, model, model_dir, ctx)


def launchers() -> dict[str, Launcher]:
    """Runtimes by name: how each turns a backend's EngineSpec into its LaunchSpec."""
    return {"local": launch_locally, "kubernetes": _kubernetes}


def launch(
    backend: Backend, model: Model, model_dir: Path | None, ctx: LaunchContext
) -> LaunchSpec:
    """The LaunchSpec of ``model`` on ``ctx.runtime``; UnsupportedBackendError (or its
    BackendNotInstalledError) when it cannot run there, InvalidSpecError for bad config."""
    launcher = launchers().get(ctx.runtime)
    if launcher is None:
        raise UnsupportedBackendError(
            f"backend {backend.name!r} is not runnable on the {ctx.runtime!r} runtime yet"
        )
    return launcher(backend, model, model_dir, ctx)
