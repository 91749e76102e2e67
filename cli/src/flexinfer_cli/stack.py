"""The embedded stack: every control-plane service's app on one event loop.

Each service is built by its own ``create_app`` exactly as its distributed ``main`` builds
it; only the bus (in memory) and the store (one SQLite file) are shared objects here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from flexinfer_cli.admin_token import AdminToken, embedded_admin_token
from flexinfer_common.auth import bearer_token
from flexinfer_common.bus import create_bus
from flexinfer_common.serving import ServerGroup, bind_socket, write_json_atomic
from flexinfer_common.settings import BusSettings, StoreSettings
from flexinfer_common.store import create_store

if TYPE_CHECKING:  # the services load when the stack is built, not with the CLI
    from flexinfer_controller.settings import ControllerSettings
    from flexinfer_proxy.settings import ProxySettings
    from flexinfer_registry.settings import RegistrySettings
    from flexinfer_scheduler.settings import SchedulerSettings

log = logging.getLogger("flexinfer.up")

ReadyHook = Callable[[dict[str, str]], Awaitable[None]]

ENDPOINTS_FILE = "endpoints.json"


@dataclass(frozen=True)
class _App:
    """One service's app, and the HTTP protocol to serve it with (None: uvicorn's)."""

    asgi: Any
    http: type[asyncio.Protocol] | None = None


class EmbeddedStack:
    """Builds and runs proxy, controller, scheduler and registry in one process."""

    def __init__(
        self,
        data_dir: Path,
        host: str,
        ports: dict[str, int],
        controller: dict[str, Any] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.host = host
        self.ports = ports
        self.controller = dict(controller or {})
        """Controller settings from ``flexinfer up``'s flags (``gpus``, ``gpu_sharing``)."""
        self._hooks: list[ReadyHook] = []
        self._settings: _Settings | None = None
        self.admin_token: AdminToken | None = None
        """The token guarding the admin API (set by ``configure``; None: open)."""

    def on_ready(self, hook: ReadyHook) -> None:
        """Run ``hook(urls)`` once every service is serving."""
        self._hooks.append(hook)

    async def run(self) -> None:
        """Serve until SIGINT/SIGTERM, then stop every service and engine."""
        bus = create_bus(BusSettings(url="memory://"))
        store = create_store(StoreSettings(url=f"sqlite:///{self.data_dir / 'flexinfer.db'}"))
        endpoints_file = self.data_dir / ENDPOINTS_FILE
        endpoints_file.unlink(missing_ok=True)
        try:
            await store.open()
            group = ServerGroup(log_level="warning", ready_file=None)
            apps = self._build_apps(bus=bus, store=store)
            urls = {
                name: group.add_app(
                    name, app.asgi, bind_socket(self.host, self.ports[name]), http=app.http
                )
                for name, app in apps.items()
            }
            group.install_signal_handlers()

            async def ready() -> None:
                urls["registry_grpc"] = str(apps["registry_http"].asgi.state.grpc_address)
                for hook in self._hooks:
                    await hook(urls)
                write_json_atomic(endpoints_file, urls)
                log.info("ready: %s", urls)

            await group.run(on_ready=ready)
        finally:
            endpoints_file.unlink(missing_ok=True)
            with contextlib.suppress(Exception):
                await store.close()
            with contextlib.suppress(Exception):
                await bus.close()

    def _guard(self) -> dict[str, Any]:
        """Settings overrides that guard an admin API with ``admin_token`` (none if open)."""
        token = self.admin_token
        if token is None:
            return {}
        if token.file is None:
            log.info("admin API guarded by FLEXINFER_CONTROLLER_AUTH_TOKEN")
        else:
            made = "generated" if token.generated else "reused"
            log.info(
                "admin API guarded: token %s in %s (send: Authorization: Bearer $(cat %s))",
                made, token.file, token.file,
            )  # fmt: skip
        return {"auth_token": SecretStr(token.value)}

    def configure(self) -> _Settings:
        """Build and check every service's settings (ValidationError, ConfigError).

        ``flexinfer up`` calls it before anything runs, so that a bad setting costs no model
        generation and starts no service.
        """
        from flexinfer_controller.settings import ControllerSettings
        from flexinfer_proxy.settings import ProxySettings
        from flexinfer_scheduler.settings import SchedulerSettings

        host, ports = self.host, self.ports
        proxy = ProxySettings(host=host, port=ports["proxy"])
        controller_values: dict[str, Any] = {
            "host": host,
            "port": ports["controller"],
            "data_dir": self.data_dir / "controller",
            # Embedded means one process owns everything: its engines go when it goes.
            "stop_engines_on_shutdown": True,
            **self.controller,
        }
        self.admin_token = embedded_admin_token(
            self.data_dir,
            ControllerSettings(**controller_values),
            host=host,
            proxy_auth=bool(proxy.auth_tokens or proxy.auth_token_file),
        )
        # One admin token guards the embedded stack: controller, scheduler and registry.
        guard = self._guard()
        registry = self._registry_settings(guard)
        controller_values["registry"] = _registry_client(registry)
        self._settings = _Settings(
            proxy=proxy,
            controller=ControllerSettings(**controller_values, **guard),
            scheduler=SchedulerSettings(host=host, port=ports["scheduler"], **guard),
            registry=registry,
        )
        return self._settings

    def _registry_settings(self, guard: dict[str, Any]) -> RegistrySettings:
        from flexinfer_registry.settings import RegistrySettings

        values: dict[str, Any] = {
            "host": self.host,
            "port": self.ports["registry_http"],
            "grpc_host": self.host,
            "grpc_port": self.ports["registry_grpc"],
            "cache_dir": self.data_dir / "registry",
        }
        registry = RegistrySettings(**values)
        # Its own FLEXINFER_REGISTRY_* settings win; else the stack's admin token, and the
        # stack's models directory as the one root file:// sources may be read under.
        defaults: dict[str, Any] = {}
        if registry.auth_token is None:
            defaults.update(guard)
        guarded = registry.auth_token is not None or bool(guard)
        if guarded and registry.p2p_token is None and registry.p2p_token_file is None:
            # Engines need the P2P scope to warm-start from each other; they die with the
            # stack, so a token generated per start (never written anywhere) serves.
            defaults["p2p_token"] = SecretStr(secrets.token_hex(24))
        if not registry.file_roots:
            defaults["file_roots"] = [self.data_dir / "models"]
        return RegistrySettings(**values, **defaults) if defaults else registry

    def _build_apps(self, **deps: Any) -> dict[str, _App]:
        from flexinfer_common.http1.server import HttpProtocol
        from flexinfer_controller.app import create_app as controller_app
        from flexinfer_proxy.app import create_app as proxy_app
        from flexinfer_proxy.serve import protocol_for
        from flexinfer_registry.app import create_app as registry_app
        from flexinfer_scheduler.app import create_app as scheduler_app

        settings = self._settings if self._settings is not None else self.configure()
        return {
            # The proxy and the scheduler serve with our own HTTP protocol, as on their own.
            "proxy": _App(proxy_app(settings.proxy, **deps), protocol_for(settings.proxy.server)),
            "controller": _App(controller_app(settings.controller, **deps)),
            "scheduler": _App(scheduler_app(settings.scheduler), HttpProtocol),
            "registry_http": _App(registry_app(settings.registry)),
        }


def _registry_client(registry: RegistrySettings) -> Any:
    """The controller's way to the embedded registry's gRPC port, with its token; the
    controller's own ``FLEXINFER_CONTROLLER_REGISTRY_*`` settings win."""
    from flexinfer_controller.adapters.registry.settings import RegistryClientSettings

    client = RegistryClientSettings()
    if client.address:
        return client
    host = registry.grpc_host
    # A wildcard listen address is dialled on loopback: the registry runs in this process.
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    host = f"[{host}]" if ":" in host else host
    token = client.auth_token or registry.auth_token
    p2p = client.p2p_token
    if p2p is None:
        value = bearer_token(registry.p2p_token, registry.p2p_token_file, kind="P2P")
        p2p = SecretStr(value) if value is not None else None
    return RegistryClientSettings(
        address=f"{host}:{registry.grpc_port}", auth_token=token, p2p_token=p2p
    )


@dataclass(frozen=True)
class _Settings:
    """Every embedded service's settings, built and checked by ``configure``."""

    proxy: ProxySettings
    controller: ControllerSettings
    scheduler: SchedulerSettings
    registry: RegistrySettings
