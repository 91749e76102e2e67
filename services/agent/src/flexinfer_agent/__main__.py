"""``python -m flexinfer_agent [--host H] [--port P]``: the node agent on its own."""

from __future__ import annotations

import argparse
import sys

from flexinfer_agent.app import create_app
from flexinfer_agent.settings import AgentSettings
from flexinfer_common.auth import resolve_admin_tokens
from flexinfer_common.service import flag_overrides, run_main, serve_app

PROG = "flexinfer-agent"


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="FlexInfer node agent: GPU discovery, node labels, heartbeats "
        "(settings: FLEXINFER_AGENT_*).",
    )
    parser.add_argument("--host", help="listen address (FLEXINFER_AGENT_HOST)")
    parser.add_argument(
        "--port", type=int, help="metrics/health port, 0 = any (FLEXINFER_AGENT_PORT)"
    )
    parser.add_argument("--node-name", help="node reported for (NODE_NAME; default: hostname)")
    return parser


async def _serve(settings: AgentSettings) -> None:
    await serve_app("agent", create_app(settings), settings.host, settings.port)


def _checked(settings: AgentSettings) -> AgentSettings:
    # An open API beyond loopback is a settings error (exit 2), found before serving.
    resolve_admin_tokens(settings, host=settings.host, telemetry=settings.telemetry)
    return settings


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Parse flags, build settings from FLEXINFER_AGENT_*, serve until SIGTERM."""
    args = _parser(prog).parse_args(argv)
    return run_main(prog, lambda: _checked(AgentSettings(**flag_overrides(args))), _serve)


if __name__ == "__main__":
    sys.exit(main())
