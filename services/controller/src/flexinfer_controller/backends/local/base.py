"""A backend's server on this machine: the LocalServer interface and the install probe."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import replace
from functools import partial

from flexinfer_controller.backends.base import (
    Backend,
    EngineSpec,
    RenderRequest,
    UnsupportedBackendError,
)
from flexinfer_controller.backends.launch import (
    HttpReadiness,
    InstallProbe,
    LaunchContext,
    LaunchSpec,
)


class BackendNotInstalledError(UnsupportedBackendError):
    """The backend's server is not installed here; the message says what to install."""


class LocalServer(ABC):
    """Runs one backend's rendered engine as a subprocess on loopback."""

    @abstractmethod
    def launch(
        self, backend: Backend, request: RenderRequest, ctx: LaunchContext, probe: InstallProbe
    ) -> LaunchSpec:
        """The LaunchSpec; BackendNotInstalledError naming what to install."""


class HttpLocalServer(LocalServer):
    """A server that binds the port it is given and is ready when its readiness path is."""

    @abstractmethod
    def command(
        self, spec: EngineSpec, ctx: LaunchContext, probe: InstallProbe
    ) -> tuple[tuple[str, ...], Mapping[str, str]] | None:
        """(argv, env) running ``spec`` here; None when the server is not installed."""

    @abstractmethod
    def install_hint(self, backend: str) -> str:
        """What to install, for the not-installed error."""

    def readiness_path(self, spec: EngineSpec, argv: tuple[str, ...]) -> str:
        """The path polled for readiness: the rendered probe's (TCP-only servers: ``/``)."""
        return spec.readiness.path or "/"

    def readiness_posts(self, spec: EngineSpec) -> tuple[tuple[str, str], ...]:
        """POSTs that complete readiness (none but for Ollama)."""
        return ()

    def launch(
        self, backend: Backend, request: RenderRequest, ctx: LaunchContext, probe: InstallProbe
    ) -> LaunchSpec:
        """Render on the backend's port (errors surface now), then per picked port."""
        bound = self._bound(backend, request, ctx, probe, backend.port)
        return replace(bound, for_port=partial(self._bound, backend, request, ctx, probe))

    def _bound(
        self,
        backend: Backend,
        request: RenderRequest,
        ctx: LaunchContext,
        probe: InstallProbe,
        port: int,
    ) -> LaunchSpec:
        spec = backend.render(replace(request, host=ctx.host, port=port))
        command = self.command(spec, ctx, probe)
        if command is None:
            raise BackendNotInstalledError(self.install_hint(backend.name))
        argv, env = command
        path = self.readiness_path(spec, argv)
        ready = HttpReadiness(
            url=f"http://{ctx.host}:{port}",
            path=path,
            timeout_s=spec.startup_timeout_s,
            then=self.readiness_posts(spec),
        )
        return LaunchSpec(
            argv=argv, served_name=spec.served_name, env=env, health_path=path, http_ready=ready
        )
