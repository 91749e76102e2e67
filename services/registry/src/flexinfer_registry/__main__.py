"""``python -m flexinfer_registry [--host H] [--port P] [--grpc-host H] [--grpc-port P]``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from pydantic import ValidationError

from flexinfer_common.serving import ServerGroup, bind_socket
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings

PROG = "flexinfer-registry"


def _parse(argv: list[str] | None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog=PROG, description="FlexInfer model registry.")
    parser.add_argument("--host", help="HTTP listen address (FLEXINFER_REGISTRY_HOST)")
    parser.add_argument("--port", type=int, help="HTTP port, 0 = any (FLEXINFER_REGISTRY_PORT)")
    parser.add_argument("--grpc-host", help="gRPC listen address (FLEXINFER_REGISTRY_GRPC_HOST)")
    parser.add_argument(
        "--grpc-port", type=int, help="gRPC port, 0 = any (FLEXINFER_REGISTRY_GRPC_PORT)"
    )
    args = parser.parse_args(argv)
    return {k: v for k, v in vars(args).items() if v is not None}


async def _serve(settings: RegistrySettings) -> None:
    group = ServerGroup(log_level=settings.log.level.lower())
    # uvicorn's ASGIApplication type does not describe FastAPI, although FastAPI is one.
    app = create_app(settings)
    url = group.add_app("registry", app, bind_socket(settings.host, settings.port))
    group.install_signal_handlers()

    async def ready() -> None:
        logging.getLogger(PROG).info("registry on %s, gRPC on %s", url, app.state.grpc_address)

    await group.run(on_ready=ready)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, build settings from FLEXINFER_REGISTRY_*, serve until SIGTERM."""
    overrides = _parse(argv)
    try:
        settings = RegistrySettings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        print(f"{PROG}: {'.'.join(map(str, first['loc']))}: {first['msg']}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log.level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(_serve(settings))
    except OSError as exc:
        print(f"{PROG}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except SystemExit:
        # A lifespan failure (the gRPC port is taken) is logged by uvicorn, which then exits
        # with SystemExit(3): turn it into one line and our own exit code.
        print(f"{PROG}: startup failed (see the log above)", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
