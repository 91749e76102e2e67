"""``python -m flexinfer_proxy [--host H] [--port P] [--static NAME=URL ...]``: run the proxy.

With ``--static`` the proxy runs alone: the declared models and endpoints replace the
controller's store, and an in-process bus replaces the shared one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.errors import InvalidSpecError
from flexinfer_common.service import bus_and_store, flag_overrides, run_main
from flexinfer_common.settings import LogSettings
from flexinfer_proxy.app import create_app
from flexinfer_proxy.serve import serve_proxy
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.static import StaticEndpoint, StaticStore, parse_static

PROG = "flexinfer-proxy"


def _static_arg(value: str) -> StaticEndpoint:
    try:
        return parse_static(value)
    except InvalidSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="FlexInfer OpenAI-compatible proxy (settings: FLEXINFER_PROXY_*)."
    )
    parser.add_argument("--host", help="listen address (FLEXINFER_PROXY_HOST)")
    parser.add_argument("--port", type=int, help="listen port, 0 = any (FLEXINFER_PROXY_PORT)")
    parser.add_argument("--log-level", help="log level (FLEXINFER_LOG_LEVEL)")
    parser.add_argument(
        "--static",
        action="append",
        type=_static_arg,
        metavar="NAME=URL",
        help="serve model NAME from the OpenAI-compatible server at URL, with no controller, "
        "bus or database (repeat for more models, or for more endpoints of one model)",
    )
    return parser


def build_settings(args: argparse.Namespace) -> ProxySettings:
    """Settings from FLEXINFER_PROXY_* (and the seed's PROXY_*), overridden by flags."""
    overrides = flag_overrides(args)
    overrides.pop("static", None)
    level = overrides.pop("log_level", None)
    if level is not None:
        overrides["log"] = LogSettings(level=level)
    return ProxySettings(**overrides)


async def _serve(settings: ProxySettings) -> None:
    async with bus_and_store(settings.bus, settings.store) as (bus, store):
        app = create_app(settings, bus=bus, store=store)
        await serve_proxy(app, settings.host, settings.port, settings.server)


def _serve_static(
    declared: list[StaticEndpoint],
) -> Callable[[ProxySettings], Coroutine[Any, Any, None]]:
    """The serve function for ``--static``: in-process bus, declared store."""

    async def serve(settings: ProxySettings) -> None:
        bus = MemoryBus()
        store = StaticStore.from_declarations(declared, settings.namespace)
        try:
            app = create_app(settings, bus=bus, store=store)
            await serve_proxy(app, settings.host, settings.port, settings.server)
        finally:
            await store.close()
            await bus.close()

    return serve


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Parse flags over FLEXINFER_PROXY_* settings and serve until SIGINT/SIGTERM."""
    args = _parser(prog).parse_args(argv)
    serve = _serve_static(args.static) if args.static else _serve
    return run_main(prog, lambda: build_settings(args), serve)


if __name__ == "__main__":
    sys.exit(main())
