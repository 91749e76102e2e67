"""Backends: how a Model's engine is launched; a name->factory registry with aliases."""

from flexinfer_controller.backends.base import (
    Backend,
    BackendRegistry,
    LaunchContext,
    LaunchSpec,
    UnsupportedBackendError,
)
from flexinfer_controller.backends.registry import default_backends

__all__ = [
    "Backend",
    "BackendRegistry",
    "LaunchContext",
    "LaunchSpec",
    "UnsupportedBackendError",
    "default_backends",
]
