"""``python -m flexinfer_controller``: run the controller with its own bus and store."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from pydantic import ValidationError

from flexinfer_common.bus import create_bus
from flexinfer_common.errors import FlexInferError
from flexinfer_common.serving import ServerGroup, bind_socket
from flexinfer_common.store import create_store
from flexinfer_controller.app import create_app
from flexinfer_controller.settings import ControllerSettings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flexinfer-controller",
        description="Reconcile declared Models onto a runtime (settings: FLEXINFER_CONTROLLER_*).",
    )
    parser.add_argument("--host", help="admin API listen address")
    parser.add_argument("--port", type=int, help="admin API port (0 picks a free one)")
    parser.add_argument("--data-dir", type=Path, help="engine state files and logs")
    return parser


def build_settings(argv: list[str] | None) -> ControllerSettings:
    """Settings from the environment, overridden by command-line flags."""
    args = _parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    return ControllerSettings(**overrides)


async def _serve(settings: ControllerSettings) -> None:
    bus = create_bus(settings.bus)
    store = create_store(settings.store)
    try:
        sock = bind_socket(settings.host, settings.port)
        group = ServerGroup(log_level=settings.log.level.lower())
        # uvicorn's ASGIApplication type does not describe FastAPI, although FastAPI is one.
        app = create_app(settings, bus=bus, store=store)
        url = group.add_app("controller", app, sock)
        group.install_signal_handlers()

        async def announce() -> None:
            logging.getLogger("flexinfer_controller").info("controller listening on %s", url)

        await group.run(on_ready=announce)
    finally:
        await store.close()
        await bus.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    try:
        settings = build_settings(argv)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        print(f"flexinfer-controller: invalid setting {where}: {first['msg']}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log.level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(_serve(settings))
    except (FlexInferError, OSError) as exc:
        print(f"flexinfer-controller: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
