"""What every service's ``main`` shares: settings, logging, serving and exit codes.

Exit codes are the same for every service, so scripts and supervisors can rely on them:
0 after a clean stop (SIGINT/SIGTERM), 1 when starting or running failed, 2 when flags or
settings are invalid. Failures print one readable line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError
from starlette.types import ASGIApp

from flexinfer_common.bus import EventBus, open_bus
from flexinfer_common.errors import ConfigError, FlexInferError
from flexinfer_common.logcontext import JsonFormatter, TextFormatter
from flexinfer_common.serving import ServerGroup, bind_socket
from flexinfer_common.settings import BusSettings, LogSettings, StoreSettings
from flexinfer_common.settings_errors import describe_settings_error
from flexinfer_common.store import ModelStore, create_store


class _Configured(Protocol):
    @property
    def log(self) -> LogSettings: ...


SettingsT = TypeVar("SettingsT", bound=_Configured)


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The flags the user actually gave, as settings overrides (None means "not given")."""
    return {key: value for key, value in vars(args).items() if value is not None}


def configure_logging(settings: LogSettings) -> None:
    """Root logging as ``settings`` asks: level, and text or one JSON object per line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.json_format else TextFormatter())
    logging.basicConfig(level=settings.level.upper(), handlers=[handler], force=True)
    # httpx logs every request at INFO: far too chatty for a proxy or a controller.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_main(
    prog: str,
    build_settings: Callable[[], SettingsT],
    serve: Callable[[SettingsT], Coroutine[Any, Any, None]],
) -> int:
    """Build settings, configure logging, run ``serve`` until stopped; return the exit code."""

    def run() -> int:
        settings = build_settings()
        configure_logging(settings.log)
        run_async(serve(settings))
        return 0

    return exit_code(prog, run)


def exit_code(prog: str, run: Callable[[], int]) -> int:
    """``run()``'s exit code; a failure a user can act on becomes one line on stderr.

    Settings are validated in more places than ``main``: groups read their own environment
    when built (the bus client's inside the event loop, a store's in an app's lifespan),
    so every start-up path of every service ends here rather than in a traceback.
    """
    try:
        return run()
    except ValidationError as exc:
        print(f"{prog}: {invalid_settings(exc)}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except (FlexInferError, OSError, RuntimeError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:
        if exc.code in (None, 0):
            return 0
        # uvicorn exits with SystemExit when a server cannot start, after logging why.
        print(f"{prog}: startup failed (see the log above)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def invalid_settings(exc: ValidationError) -> str:
    """One readable line for settings that failed validation (never the values given)."""
    return describe_settings_error(exc)


def run_async(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` on uvloop where installed (it ships with uvicorn[standard])."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(coro)
        return
    uvloop.run(coro)


async def serve_app(
    name: str,
    app: ASGIApp,
    host: str,
    port: int,
    *,
    on_ready: Callable[[str], Awaitable[None]] | None = None,
    http: type[asyncio.Protocol] | None = None,
) -> None:
    """Serve one app until SIGINT/SIGTERM; ``on_ready(url)`` runs once it accepts requests.

    ``http`` replaces uvicorn's HTTP protocol (``flexinfer_common.http1.server``)."""
    group = ServerGroup()
    url = group.add_app(name, app, bind_socket(host, port), http=http)
    group.install_signal_handlers()

    async def ready() -> None:
        logging.getLogger(f"flexinfer_{name}").info("%s serving on %s", name, url)
        if on_ready is not None:
            await on_ready(url)

    await group.run(on_ready=ready)


@asynccontextmanager
async def bus_and_store(
    bus_settings: BusSettings, store_settings: StoreSettings
) -> AsyncIterator[tuple[EventBus, ModelStore]]:
    """The configured bus and store, closed when the block exits."""
    bus = await open_bus(bus_settings)  # a bus that never answers fails the start
    try:
        store = create_store(store_settings)
        try:
            await store.open()  # a store that cannot serve fails the start, as the bus does
            yield bus, store
        finally:
            await store.close()
    finally:
        await bus.close()
