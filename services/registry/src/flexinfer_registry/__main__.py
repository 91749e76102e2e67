"""``python -m flexinfer_registry [--host H] [--port P] [--grpc-host H] [--grpc-port P]``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from flexinfer_common.malloc import keep_large_buffers
from flexinfer_common.service import flag_overrides, run_main, serve_app
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings

PROG = "flexinfer-registry"


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="FlexInfer model registry: caches model weights, speaks ModelExpress gRPC "
        "(settings: FLEXINFER_REGISTRY_*, MX_*).",
    )
    parser.add_argument("--host", help="HTTP listen address (FLEXINFER_REGISTRY_HOST)")
    parser.add_argument("--port", type=int, help="HTTP port, 0 = any (FLEXINFER_REGISTRY_PORT)")
    parser.add_argument("--grpc-host", help="gRPC listen address (FLEXINFER_REGISTRY_GRPC_HOST)")
    parser.add_argument(
        "--grpc-port", type=int, help="gRPC port, 0 = any (FLEXINFER_REGISTRY_GRPC_PORT)"
    )
    parser.add_argument(
        "--config",
        dest="config_file",
        type=Path,
        help="a ModelExpress server YAML config file (FLEXINFER_REGISTRY_CONFIG_FILE)",
    )
    return parser


async def _serve(settings: RegistrySettings) -> None:
    app = create_app(settings)

    async def ready(url: str) -> None:
        logging.getLogger(PROG).info("registry gRPC on %s", app.state.grpc_address)

    await serve_app("registry", app, settings.host, settings.port, on_ready=ready)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Parse flags, build settings from FLEXINFER_REGISTRY_*, serve until SIGTERM."""
    args = _parser(prog).parse_args(argv)
    keep_large_buffers()  # StreamModelFiles sends 1 MiB messages: see flexinfer_common.malloc
    return run_main(prog, lambda: RegistrySettings(**flag_overrides(args)), _serve)


if __name__ == "__main__":
    sys.exit(main())
