"""``python -m flexinfer_proxy [--host H] [--port P]``: run the proxy on its own."""

from __future__ import annotations

import argparse
import sys

from flexinfer_common.service import bus_and_store, flag_overrides, run_main, serve_app
from flexinfer_common.settings import LogSettings
from flexinfer_proxy.app import create_app
from flexinfer_proxy.settings import ProxySettings

PROG = "flexinfer-proxy"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="FlexInfer OpenAI-compatible proxy")
    parser.add_argument("--host", help="listen address (FLEXINFER_PROXY_HOST)")
    parser.add_argument("--port", type=int, help="listen port, 0 = any (FLEXINFER_PROXY_PORT)")
    parser.add_argument("--log-level", help="log level (FLEXINFER_LOG_LEVEL)")
    return parser


def build_settings(args: argparse.Namespace) -> ProxySettings:
    """Settings from FLEXINFER_PROXY_* (and the seed's PROXY_*), overridden by flags."""
    overrides = flag_overrides(args)
    level = overrides.pop("log_level", None)
    if level is not None:
        overrides["log"] = LogSettings(level=level)
    return ProxySettings(**overrides)


async def _serve(settings: ProxySettings) -> None:
    async with bus_and_store(settings.bus, settings.store) as (bus, store):
        app = create_app(settings, bus=bus, store=store)
        await serve_app("proxy", app, settings.host, settings.port)


def main(argv: list[str] | None = None) -> int:
    """Parse flags over FLEXINFER_PROXY_* settings and serve until SIGINT/SIGTERM."""
    args = _parser().parse_args(argv)
    return run_main(PROG, lambda: build_settings(args), _serve)


if __name__ == "__main__":
    sys.exit(main())
