"""The default backend registry."""

from __future__ import annotations

from functools import partial

from flexinfer_controller.backends.base import BackendFactory, BackendRegistry
from flexinfer_controller.backends.external import EXTERNAL_BACKENDS, ExternalBackend
from flexinfer_controller.backends.reference import ReferenceBackend


def default_backends() -> BackendRegistry:
    """reference plus every seed backend (known names, not runnable locally yet)."""
    factories: dict[str, BackendFactory] = {"reference": ReferenceBackend}
    for name, aliases in EXTERNAL_BACKENDS.items():
        factories[name] = partial(ExternalBackend, name, aliases)
    return BackendRegistry(factories)
