"""Backends: each renders its engine for a Model; a name->factory registry with aliases."""

from flexinfer_controller.backends.base import (
    AdapterEndpoints,
    Backend,
    BackendRegistry,
    EngineSpec,
    ModelPassing,
    Probe,
    RenderRequest,
    SleepEndpoints,
    UnsupportedBackendError,
)
from flexinfer_controller.backends.launch import (
    HttpReadiness,
    InstallProbe,
    LaunchContext,
    LaunchSpec,
    StaticProbe,
    SystemProbe,
)
from flexinfer_controller.backends.launchers import launch
from flexinfer_controller.backends.local.base import BackendNotInstalledError
from flexinfer_controller.backends.registry import backend_factories, default_backends

__all__ = [
    "AdapterEndpoints",
    "Backend",
    "BackendNotInstalledError",
    "BackendRegistry",
    "EngineSpec",
    "HttpReadiness",
    "InstallProbe",
    "LaunchContext",
    "LaunchSpec",
    "ModelPassing",
    "Probe",
    "RenderRequest",
    "SleepEndpoints",
    "StaticProbe",
    "SystemProbe",
    "UnsupportedBackendError",
    "backend_factories",
    "default_backends",
    "launch",
]
