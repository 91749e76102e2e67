"""What the proxy forwards: each backend's inference routes (flexinfer_common.backends).

Deny by default: an engine also serves admin routes (vLLM's ``/sleep`` and
``/v1/load_lora_adapter``, Ollama's ``/api/pull``, llama.cpp's ``/slots``, the reference
engine's ``/sleep?level=2``), and one client reaching them acts for every client. So only
the routes a backend documents for inference are forwarded, always with POST; every other
path answers 404 in OpenAI's shape. A client names the model's engine either by a route
alone (``/v1/chat/completions``) or under the ``/model/<name>/`` prefix
(``/model/llama/v1/chat/completions``), which is stripped before forwarding.
"""

from __future__ import annotations

from flexinfer_common.backends import EXTERNAL, alias_table, route_table

MODEL_PREFIX = "/model/"
"""A path prefix naming the model: ``/model/<name>/<route>``."""

_RAW_PREFIX = MODEL_PREFIX.encode()
APP_PATHS = frozenset({b"/v1/models", b"/healthz", b"/readyz", b"/metrics"})
"""Paths the proxy's app answers itself (GET), with ``/v1/models/<id>``: a POST there gets
the app's 405."""


class Surface:
    """Which routes may reach a model's engine."""

    def __init__(self, routes: dict[str, frozenset[str]], aliases: dict[str, str]) -> None:
        self._routes = routes
        self._aliases = aliases
        self.all_routes = frozenset().union(*routes.values())
        """Every route any backend serves: anything else is unknown to the proxy."""
        self._raw_routes = frozenset(route.encode() for route in self.all_routes)

    def routes(self, backend: str, external: bool) -> frozenset[str]:
        """The routes forwarded for a model of ``backend`` (``external``: spec.endpoints)."""
        if external:
            return self._routes[EXTERNAL]
        routes = self._routes.get(backend)
        if routes is None:
            name = backend.lower()
            routes = self._routes.get(self._aliases.get(name, name), frozenset())
        return routes

    def allows(self, backend: str, external: bool, route: str) -> bool:
        """Whether ``route`` (a decoded, normalised path) is forwarded for such a model."""
        return route in self.routes(backend, external)

    def known(self, route: str) -> bool:
        """Whether any backend serves ``route``."""
        return route in self.all_routes

    def proxied(self, raw_path: bytes) -> bool:
        """Whether ``raw_path`` (as received) names a proxied route, whatever the method."""
        return raw_path.startswith(_RAW_PREFIX) or raw_path in self._raw_routes

    @staticmethod
    def handles(raw_path: bytes) -> bool:
        """Whether a POST to ``raw_path`` (as received) is the pipeline's to answer: all
        are, but for the app's own paths. The pipeline checks the target and the route,
        so a hostile or unknown one is answered in one place (400 or 404)."""
        return raw_path not in APP_PATHS and not raw_path.startswith(b"/v1/models/")


def default_surface() -> Surface:
    """The shared table of backend routes and aliases, which the controller's plugins declare."""
    return Surface(route_table(), alias_table())
