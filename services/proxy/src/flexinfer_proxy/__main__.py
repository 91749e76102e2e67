"""``python -m flexinfer_proxy [--host H] [--port P]``: run the proxy on its own."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import pydantic

from flexinfer_common.bus import create_bus
from flexinfer_common.errors import FlexInferError
from flexinfer_common.serving import ServerGroup, bind_socket
from flexinfer_common.store import create_store
from flexinfer_proxy.app import create_app
from flexinfer_proxy.settings import ProxySettings

log = logging.getLogger("flexinfer_proxy")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flexinfer-proxy", description="FlexInfer OpenAI-compatible proxy"
    )
    parser.add_argument("--host", help="listen address (FLEXINFER_PROXY_HOST)")
    parser.add_argument("--port", type=int, help="listen port, 0 = any (FLEXINFER_PROXY_PORT)")
    parser.add_argument("--log-level", help="log level (FLEXINFER_LOG_LEVEL)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse flags over FLEXINFER_PROXY_* settings and serve until SIGINT/SIGTERM."""
    args = _parser().parse_args(argv)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    try:
        settings = ProxySettings(**overrides)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        print(f"flexinfer-proxy: invalid setting {where}: {first['msg']}", file=sys.stderr)
        return 2
    level = (args.log_level or settings.log.level).upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_serve(settings))
    except (OSError, FlexInferError) as exc:
        print(f"flexinfer-proxy: {exc}", file=sys.stderr)
        return 1


async def _serve(settings: ProxySettings) -> int:
    sock = bind_socket(settings.host, settings.port)
    bus = create_bus(settings.bus)
    store = create_store(settings.store)
    try:
        group = ServerGroup(log_level="warning")
        app = create_app(settings, bus=bus, store=store)
        url = group.add_app("proxy", app, sock)
        group.install_signal_handlers()

        async def announce() -> None:
            log.info("proxy %s serving on %s", settings.instance_id, url)

        await group.run(on_ready=announce)
    finally:
        await bus.close()
        await store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
