"""``python -m flexinfer_agent``: the node agent; ``--print`` shows what it discovers."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from prometheus_client import CollectorRegistry

from flexinfer_agent.app import create_app
from flexinfer_agent.core.discovery import Discovery
from flexinfer_agent.core.heartbeat import Heartbeat
from flexinfer_agent.metrics import AgentMetrics
from flexinfer_agent.reporting import open_reporter
from flexinfer_agent.settings import AgentSettings, HeartbeatSettings, LabelSettings
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
    parser.add_argument(
        "--report",
        choices=["auto", "kubernetes", "bus", "none"],
        help="where heartbeats go (FLEXINFER_AGENT_REPORT; default auto)",
    )
    parser.add_argument("--interval", type=float, help="seconds between heartbeats (default 30)")
    parser.add_argument("--label-prefix", help="prefix of the node keys (default flexinfer.ai/)")
    parser.add_argument(
        "--once", action="store_true", default=None, help="run one heartbeat, report it, exit"
    )
    parser.add_argument(
        "--print",
        action="store_true",
        default=None,
        help="print the node's GPUs, labels and annotations as JSON and exit "
        "(reports nothing unless --once is given too)",
    )
    return parser


def _settings(args: argparse.Namespace) -> AgentSettings:
    overrides: dict[str, Any] = flag_overrides(args)
    once, show = overrides.pop("once", False), overrides.pop("print", False)
    if (interval := overrides.pop("interval", None)) is not None:
        overrides["heartbeat"] = HeartbeatSettings(interval_s=interval)
    if (prefix := overrides.pop("label_prefix", None)) is not None:
        overrides["labels"] = LabelSettings(prefix=prefix)
    if show and not once:
        overrides["report"] = "none"
    return AgentSettings(**overrides)


async def _once(settings: AgentSettings, show: bool) -> None:
    async with open_reporter(settings) as reporter:
        heartbeat = Heartbeat(
            node=settings.node_name,
            prefix=settings.labels.prefix,
            discovery=Discovery.from_settings(settings.discovery),
            reporter=reporter,
            observer=AgentMetrics(CollectorRegistry()),
            interval_s=settings.heartbeat.interval_s,
        )
        snapshot = await heartbeat.beat()
    if show:
        print(json.dumps(snapshot.as_json(), indent=2))


async def _serve(settings: AgentSettings) -> None:
    await serve_app("agent", create_app(settings), settings.host, settings.port)


def _checked(settings: AgentSettings) -> AgentSettings:
    # An open API beyond loopback is a settings error (exit 2), found before serving.
    resolve_admin_tokens(settings, host=settings.host, telemetry=settings.telemetry)
    return settings


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Parse flags, build settings from FLEXINFER_AGENT_*, serve until SIGTERM (or run once)."""
    args = _parser(prog).parse_args(argv)
    if args.once or args.print:
        show = bool(args.print)
        return run_main(prog, lambda: _settings(args), lambda s: _once(s, show))
    return run_main(prog, lambda: _checked(_settings(args)), _serve)


if __name__ == "__main__":
    sys.exit(main())
