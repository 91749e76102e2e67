"""``python -m flexinfer_scheduler [--host H] [--port P]``: the scheduler on its own."""

from __future__ import annotations

import argparse
import sys

from flexinfer_common.auth import resolve_admin_tokens
from flexinfer_common.http1.server import HttpProtocol
from flexinfer_common.service import flag_overrides, run_main, serve_app
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.settings import SchedulerSettings

PROG = "flexinfer-scheduler"


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="FlexInfer Kubernetes scheduler extender (settings: FLEXINFER_SCHEDULER_*).",
    )
    parser.add_argument("--host", help="listen address (FLEXINFER_SCHEDULER_HOST)")
    parser.add_argument("--port", type=int, help="listen port, 0 = any (FLEXINFER_SCHEDULER_PORT)")
    return parser


async def _serve(settings: SchedulerSettings) -> None:
    # FlexInfer's own HTTP/1.1 protocol: it serves the extender verbs without ASGI.
    app = create_app(settings)
    await serve_app("scheduler", app, settings.host, settings.port, http=HttpProtocol)


def _checked(settings: SchedulerSettings) -> SchedulerSettings:
    # An open API beyond loopback is a settings error (exit 2), found before serving.
    resolve_admin_tokens(settings, host=settings.host, telemetry=settings.telemetry)
    return settings


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Parse flags, build settings from FLEXINFER_SCHEDULER_*, serve until SIGTERM."""
    args = _parser(prog).parse_args(argv)
    return run_main(prog, lambda: _checked(SchedulerSettings(**flag_overrides(args))), _serve)


if __name__ == "__main__":
    sys.exit(main())
