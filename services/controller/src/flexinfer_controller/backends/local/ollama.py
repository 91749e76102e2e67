"""Ollama locally: ``ollama serve`` on OLLAMA_HOST=127.0.0.1:PORT, then the model is pulled.

Once ``GET /`` answers, the runtime POSTs ``/api/pull`` (the ``ollama://`` tag, not
streamed: it answers when the download is complete) and, when the served name differs
from the tag, ``/api/copy`` so that requests naming the served model find it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from flexinfer_controller.backends.base import EngineSpec
from flexinfer_controller.backends.launch import InstallProbe, LaunchContext
from flexinfer_controller.backends.local.base import HttpLocalServer


class OllamaLocal(HttpLocalServer):
    """The ``ollama`` executable from PATH, with the rendered args and env."""

    def command(
        self, spec: EngineSpec, ctx: LaunchContext, probe: InstallProbe
    ) -> tuple[tuple[str, ...], Mapping[str, str]] | None:
        """``ollama serve``, OLLAMA_HOST as rendered for the picked port."""
        executable = probe.which("ollama")
        if executable is None:
            return None
        return (executable, *spec.args), {**spec.env, "OLLAMA_HOST": f"{spec.host}:{spec.port}"}

    def readiness_posts(self, spec: EngineSpec) -> tuple[tuple[str, str], ...]:
        """Pull the tag, then copy it to the served name."""
        if not spec.pull:
            return ()
        posts = [("/api/pull", json.dumps({"model": spec.pull, "stream": False}))]
        if spec.served_name != spec.pull:
            copy = {"source": spec.pull, "destination": spec.served_name}
            posts.append(("/api/copy", json.dumps(copy)))
        return tuple(posts)

    def install_hint(self, backend: str) -> str:
        """The ollama executable."""
        return (
            f"backend {backend!r} needs the ollama server: install ollama "
            "(https://ollama.com/download) so that `ollama` is on PATH, "
            "or run on the kubernetes runtime"
        )
