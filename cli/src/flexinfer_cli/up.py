"""``flexinfer up``: proxy, controller, registry and scheduler in one process.

It needs no Redis, Docker or GPU: an in-memory bus, SQLite under ``--data-dir``, the
``local`` runtime (engines as subprocesses) and a tiny reference model generated on first
run. Distributed mode runs the very same apps, one per process, configured for Redis and
PostgreSQL instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexinfer_cli import demo
from flexinfer_cli.args import parser
from flexinfer_cli.gpus import GpuSpecError, parse_gpus
from flexinfer_cli.stack import EmbeddedStack
from flexinfer_common.logcontext import TextFormatter
from flexinfer_common.malloc import keep_large_buffers
from flexinfer_common.service import exit_code, run_async

log = logging.getLogger("flexinfer.up")

DEFAULT_PORTS = {
    "proxy": 8080,
    "controller": 8090,
    "scheduler": 8888,
    "registry_http": 8011,
    "registry_grpc": 8001,
}


@dataclass(frozen=True)
class UpOptions:
    """What ``flexinfer up`` was asked to do."""

    data_dir: Path
    host: str
    ports: dict[str, int]
    demo: bool
    idle_timeout: str
    log_level: str
    controller: dict[str, Any] = field(default_factory=dict)
    """Controller settings the flags set (``gpus``, ``gpu_sharing``); they win over the
    environment's ``FLEXINFER_CONTROLLER_*``."""


def parse_options(argv: list[str]) -> UpOptions:
    """Parse ``flexinfer up`` flags."""
    p = parser("up", "Run the embedded FlexInfer stack in one process.")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("FLEXINFER_DATA_DIR", ".flexinfer")),
        help="all state: SQLite, model cache, engine logs (default ./.flexinfer)",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface every service listens on")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORTS["proxy"],
        help="proxy port (default 8080); 0 gives every service a free port",
    )
    p.add_argument(
        "--controller-port", type=int, default=None, help="admin API port (default 8090)"
    )
    p.add_argument(
        "--registry-grpc-port", type=int, default=None, help="registry gRPC port (default 8001)"
    )
    p.add_argument("--no-demo", action="store_true", help="do not generate and apply the demo")
    p.add_argument("--idle-timeout", default="5m", help="demo model idle timeout (default 5m)")
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    _gpu_arguments(p)
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:
        p.error("--port must be between 0 and 65535")
    controller: dict[str, Any] = {}
    if args.gpus is not None:
        try:
            controller["gpus"] = parse_gpus(args.gpus)
        except GpuSpecError as exc:
            p.error(f"--gpus: {exc}")
    if args.gpu_sharing is not None:
        controller["gpu_sharing"] = {"mode": args.gpu_sharing}
    ports = {name: 0 if args.port == 0 else default for name, default in DEFAULT_PORTS.items()}
    ports["proxy"] = args.port
    if args.controller_port is not None:
        ports["controller"] = args.controller_port
    if args.registry_grpc_port is not None:
        ports["registry_grpc"] = args.registry_grpc_port
    return UpOptions(
        data_dir=args.data_dir.resolve(),
        host=args.host,
        ports=ports,
        demo=not args.no_demo,
        idle_timeout=args.idle_timeout,
        log_level=args.log_level,
        controller=controller,
    )


def _gpu_arguments(p: argparse.ArgumentParser) -> None:
    """--gpus and --gpu-sharing: what GPUs this machine has, and who takes turns on them."""
    p.add_argument(
        "--gpus",
        metavar="SPEC",
        help="declare this machine's GPUs for the local runtime, e.g. '1x nvidia sm_90 24GiB' "
        "(several: separated by ';'; or FLEXINFER_CONTROLLER_GPUS's JSON list). Without it "
        "the runtime knows only the CPU (or FLEXINFER_CONTROLLER_GPUS)",
    )
    p.add_argument(
        "--gpu-sharing",
        choices=["none", "arbiter"],
        help="arbiter: Models of one spec.gpu.shared group take turns on their GPU by demand "
        "and priority (default: FLEXINFER_CONTROLLER_GPU_SHARING_MODE, else none)",
    )


def _configure_logging(level: str, log_file: Path) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    # Human lines, with the model, request ID and trace of a request's lines in brackets.
    fmt = TextFormatter()
    handlers: list[logging.Handler] = [
        logging.StreamHandler(sys.stderr),
        logging.FileHandler(log_file),
    ]
    for handler in handlers:
        handler.setFormatter(fmt)
    logging.basicConfig(level=level.upper(), handlers=handlers, force=True)
    # httpx logs every proxied request at INFO: far too chatty for a terminal.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def main(argv: list[str]) -> int:
    """Run the embedded stack until SIGINT/SIGTERM."""
    options = parse_options(argv)
    return exit_code("flexinfer up", lambda: _run(options))


def _run(options: UpOptions) -> int:
    options.data_dir.mkdir(parents=True, exist_ok=True)
    _configure_logging(options.log_level, options.data_dir / "logs" / "flexinfer.log")
    keep_large_buffers()  # the embedded registry streams model files in 1 MiB messages
    stack = EmbeddedStack(options.data_dir, options.host, options.ports, options.controller)
    stack.configure()
    if options.demo:
        model_dir = demo.ensure_demo_model(options.data_dir)
        stack.on_ready(
            lambda urls: demo.apply_demo(urls, model_dir, options.idle_timeout, stack.admin_token)
        )
    run_async(stack.run())
    return 0
