"""``python -m flexinfer_scheduler [--host H] [--port P]``: the scheduler on its own."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from pydantic import ValidationError

from flexinfer_common.serving import ServerGroup, bind_socket
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.settings import SchedulerSettings

PROG = "flexinfer-scheduler"


def _parse(argv: list[str] | None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog=PROG, description="FlexInfer scheduler extender.")
    parser.add_argument("--host", help="listen address (FLEXINFER_SCHEDULER_HOST)")
    parser.add_argument("--port", type=int, help="listen port, 0 = any (FLEXINFER_SCHEDULER_PORT)")
    args = parser.parse_args(argv)
    return {k: v for k, v in vars(args).items() if v is not None}


async def _serve(settings: SchedulerSettings) -> None:
    group = ServerGroup(log_level=settings.log.level.lower())
    # uvicorn's ASGIApplication type does not describe FastAPI, although FastAPI is one.
    app = create_app(settings)
    url = group.add_app("scheduler", app, bind_socket(settings.host, settings.port))
    group.install_signal_handlers()
    logging.getLogger(PROG).info("scheduler listening on %s", url)
    await group.run()


def main(argv: list[str] | None = None) -> int:
    """Parse flags, build settings from FLEXINFER_SCHEDULER_*, serve until SIGTERM."""
    overrides = _parse(argv)
    try:
        settings = SchedulerSettings(**overrides)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
