"""Each backend plugin's routes are what the proxy forwards: both read one table."""

from __future__ import annotations

import pytest

from flexinfer_common.backends import BACKENDS, OPENAI_ROUTES
from flexinfer_controller.backends import default_backends
from flexinfer_proxy.core.surface import default_surface


@pytest.mark.parametrize("name", default_backends().names())
def test_plugin_routes_are_the_routes_the_proxy_forwards(name: str) -> None:
    registry = default_backends()
    backend = registry.get(name)
    assert backend is not None
    surface = default_surface()
    assert backend.routes == surface.routes(name, external=False)
    assert backend.routes, name
    for alias in backend.aliases:
        assert surface.routes(alias.upper(), external=False) == backend.routes, alias
        assert registry.get(alias.upper()) is backend


def test_every_known_backend_has_a_plugin_and_no_admin_route_is_forwarded() -> None:
    assert sorted(f.name for f in BACKENDS) == default_backends().names()
    surface = default_surface()
    assert surface.routes("vllm", external=True) == OPENAI_ROUTES
    admin = {"/sleep", "/wake_up", "/v1/load_lora_adapter", "/api/pull", "/api/copy", "/slots"}
    for name in default_backends().names():
        backend = default_backends().get(name)
        assert backend is not None
        assert not backend.routes & admin, name
        if backend.sleep is not None:
            assert not {backend.sleep.sleep, backend.sleep.wake} & backend.routes
