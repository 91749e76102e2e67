"""``python -m flexinfer_controller``: run the controller with its own bus and store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flexinfer_common.auth import resolve_admin_tokens
from flexinfer_common.bus import open_bus
from flexinfer_common.service import flag_overrides, run_main, serve_app
from flexinfer_controller.app import create_app
from flexinfer_controller.runtime.registry import open_models
from flexinfer_controller.settings import ControllerSettings

PROG = "flexinfer-controller"


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Reconcile declared Models onto a runtime (settings: FLEXINFER_CONTROLLER_*).",
    )
    parser.add_argument("--host", help="admin API listen address")
    parser.add_argument("--port", type=int, help="admin API port (0 picks a free one)")
    parser.add_argument("--data-dir", type=Path, help="engine state files and logs")
    return parser


def build_settings(argv: list[str] | None) -> ControllerSettings:
    """Settings from the environment, overridden by command-line flags."""
    return _checked(ControllerSettings(**flag_overrides(_parser().parse_args(argv))))


def _checked(settings: ControllerSettings) -> ControllerSettings:
    # An open admin API beyond loopback is a settings error (exit 2), found before serving.
    resolve_admin_tokens(settings, host=settings.host, telemetry=settings.telemetry)
    return settings


async def _serve(settings: ControllerSettings) -> None:
    bus = await open_bus(settings.bus)  # a bus that never answers fails the start
    try:
        # The SQL store, or (runtime=kubernetes) the apiserver's Models and their informers.
        async with open_models(settings) as (store, feed):
            app = create_app(settings, bus=bus, store=store, feed=feed)
            await serve_app("controller", app, settings.host, settings.port)
    finally:
        await bus.close()


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Entry point; returns the exit status."""
    args = _parser(prog).parse_args(argv)
    return run_main(prog, lambda: _checked(ControllerSettings(**flag_overrides(args))), _serve)


if __name__ == "__main__":
    sys.exit(main())
