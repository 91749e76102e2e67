"""The reference engine locally: ``<engine_python> -m flexinfer_engine serve``, ready fd."""

from __future__ import annotations

from dataclasses import replace

from flexinfer_controller.backends.base import Backend, RenderRequest
from flexinfer_controller.backends.launch import InstallProbe, LaunchContext, LaunchSpec
from flexinfer_controller.backends.local.base import LocalServer


class ReferenceLocal(LocalServer):
    """Port 0: the engine picks a free port and writes its URL on the ready fd."""

    def launch(
        self, backend: Backend, request: RenderRequest, ctx: LaunchContext, probe: InstallProbe
    ) -> LaunchSpec:
        """The rendered args after the engine interpreter (always installed with us)."""
        spec = backend.render(replace(request, host=ctx.host, port=0))
        argv = (ctx.engine_python, "-m", "flexinfer_engine", "serve", *spec.args)
        return LaunchSpec(argv=argv, served_name=spec.served_name, env=spec.env)
