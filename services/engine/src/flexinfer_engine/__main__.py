"""``python -m flexinfer_engine serve|generate``: the engine process and the model generator."""

from __future__ import annotations

import time

# Taken before the heavy imports (torch, fastapi) so startup cost stays visible in logs.
_ENTERED_AT = time.time()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from flexinfer_common.errors import FlexInferError  # noqa: E402
from flexinfer_common.service import exit_code  # noqa: E402
from flexinfer_common.serving import ServerGroup, bind_socket, socket_url  # noqa: E402
from flexinfer_common.settings import LogSettings  # noqa: E402
from flexinfer_engine.app import create_app, engine_info  # noqa: E402
from flexinfer_engine.core.adapter_weights import DEFAULT_TARGETS, generate_adapter  # noqa: E402
from flexinfer_engine.core.config import PRESETS, parameter_count  # noqa: E402
from flexinfer_engine.core.runner import AsyncRunner  # noqa: E402
from flexinfer_engine.core.weights import generate_model  # noqa: E402
from flexinfer_engine.settings import EngineSettings  # noqa: E402

log = logging.getLogger("flexinfer_engine")


PROG = "flexinfer-engine"


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The FlexInfer reference engine: serve a model over the OpenAI API, or "
        "generate a deterministic model to serve.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve a model over the OpenAI API",
        description="Serve a model directory over the OpenAI API (settings: FLEXINFER_ENGINE_*).",
    )
    serve.add_argument("--model-dir", type=Path, help="directory with config.json + weights")
    serve.add_argument("--served-model-name", help="model name clients use")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 0: any free port)")
    serve.add_argument("--ready-fd", type=int, help="fd to write one JSON ready line to")
    serve.add_argument("--device", help="torch device (default cpu)")
    serve.add_argument("--log-level", help="log level (default from FLEXINFER_LOG_LEVEL)")
    serve.add_argument("--max-loras", type=int, help="LoRA adapters loaded at once (default 1)")
    serve.add_argument("--max-lora-rank", type=int, help="highest adapter rank (default 16)")
    serve.add_argument(
        "--lora-root",
        type=Path,
        action="append",
        help="directory adapters may be loaded from (repeatable; default: none, loads refused)",
    )
    add_generate_arguments(
        commands.add_parser("generate", help=GENERATE_HELP, description=GENERATE_DESCRIPTION)
    )
    add_generate_adapter_arguments(
        commands.add_parser("generate-adapter", help=ADAPTER_HELP, description=ADAPTER_DESCRIPTION)
    )
    return parser


GENERATE_HELP = "write a deterministic random model"
GENERATE_DESCRIPTION = (
    "Write a deterministic reference model (config.json, tokenizer, model.safetensors) in "
    "Hugging Face layout; the same name, preset and seed always give the same weights."
)


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``generate`` (also those of ``flexinfer model generate``)."""
    parser.add_argument("name", help="model name (part of the weights' seed)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), default="tiny", help="model size (default tiny)"
    )
    parser.add_argument("--seed", type=int, default=0, help="weights' seed (default 0)")


ADAPTER_HELP = "write a deterministic random LoRA adapter for a generated model"
ADAPTER_DESCRIPTION = (
    "Write a deterministic LoRA adapter (adapter_config.json, adapter_model.safetensors) in "
    "PEFT layout for the model in --model-dir; the same name, model, rank, targets and seed "
    "always give the same weights."
)


def add_generate_adapter_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``generate-adapter`` (also ``flexinfer model generate-adapter``)."""
    parser.add_argument("name", help="adapter name (part of the weights' seed)")
    parser.add_argument("--model-dir", type=Path, required=True, help="the base model")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank r (default 8)")
    parser.add_argument("--alpha", type=float, default=16.0, help="lora_alpha (default 16)")
    parser.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help=f"comma-separated target modules (default {','.join(DEFAULT_TARGETS)})",
    )
    parser.add_argument("--seed", type=int, default=0, help="weights' seed (default 0)")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Entry point; returns the process exit code."""
    args = _parser(prog).parse_args(argv)
    if args.command == "generate":
        return generate(args, prog)
    if args.command == "generate-adapter":
        return generate_adapter_command(args, prog)
    return exit_code(prog, lambda: _serve(args))


def generate(args: argparse.Namespace, prog: str = PROG) -> int:
    """Write the model ``args`` describe and print a JSON summary; returns the exit code."""
    started = time.perf_counter()
    try:
        path = generate_model(args.out, name=args.name, preset=args.preset, seed=args.seed)
    except (FlexInferError, OSError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    summary = {
        "path": str(path),
        "name": args.name,
        "preset": args.preset,
        "seed": args.seed,
        "parameters": parameter_count(PRESETS[args.preset]),
        "seconds": round(time.perf_counter() - started, 3),
    }
    print(json.dumps(summary))
    return 0


def generate_adapter_command(args: argparse.Namespace, prog: str = PROG) -> int:
    """Write the adapter ``args`` describe and print a JSON summary; returns the exit code."""
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    try:
        path = generate_adapter(
            args.out,
            name=args.name,
            model_dir=args.model_dir,
            rank=args.rank,
            alpha=args.alpha,
            targets=targets,
            seed=args.seed,
        )
    except (FlexInferError, OSError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    summary = {"path": str(path), "name": args.name, "rank": args.rank, "targets": targets}
    print(json.dumps(summary))
    return 0


def _serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        "model_dir": args.model_dir,
        "served_model_name": args.served_model_name,
        "host": args.host,
        "port": args.port,
        "device": args.device,
        "max_loras": args.max_loras,
        "max_lora_rank": args.max_lora_rank,
        "lora_roots": args.lora_root,
    }
    if args.log_level is not None:
        overrides["log"] = LogSettings(level=args.log_level)  # checked like the variable
    settings = EngineSettings(**{k: v for k, v in overrides.items() if v is not None})
    logging.basicConfig(
        level=settings.log.level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    if args.ready_fd is not None:
        os.fstat(args.ready_fd)  # fail now, not after loading, when the fd is bad
    sock = bind_socket(settings.host, settings.port)
    url = socket_url(sock)
    try:
        # TRACEPARENT: the environment carrier of W3C trace context; the controller sets
        # it on an engine it starts for a traced scale-up.
        app = create_app(settings, url=url, trace_parent=os.environ.get("TRACEPARENT"))
    except BaseException:
        sock.close()
        raise
    runner: AsyncRunner = app.state.runner
    group = ServerGroup(log_level=settings.log.level.lower())
    group.add_app("engine", app, sock)
    log.debug("entered main %.3fs after import", time.time() - _ENTERED_AT)
    return asyncio.run(_run(group, runner, app.title, args.ready_fd, url))


async def _run(
    group: ServerGroup, runner: AsyncRunner, title: str, ready_fd: int | None, url: str
) -> int:
    group.install_signal_handlers()
    outcome: list[int] = []
    tasks: set[asyncio.Task[None]] = set()

    async def when_loaded() -> None:
        if not await runner.wait_loaded():
            print(f"flexinfer-engine: error: {runner.error}", file=sys.stderr)
            outcome.append(1)
            group.stop()
            return
        info = engine_info(runner, "", url)
        line = {
            k: info[k]
            for k in ("pid", "url", "port", "process_start_seconds", "weight_load_seconds")
        }
        log.info("%s ready at %s: %s", title, url, line)
        if ready_fd is None:
            return
        try:
            with os.fdopen(ready_fd, "w", encoding="utf-8") as stream:
                stream.write(json.dumps(line) + "\n")
        except OSError as exc:
            # The reader (the controller that started us) is gone: nobody will route here,
            # and staying up would leave an orphan holding the model's memory.
            print(
                f"flexinfer-engine: error: cannot report readiness on fd {ready_fd} ({exc}); "
                "the process that started this engine is gone",
                file=sys.stderr,
            )
            outcome.append(1)
            group.stop()

    async def on_ready() -> None:
        task = asyncio.create_task(when_loaded())
        tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(tasks.discard)

    await group.run(on_ready)
    return outcome[0] if outcome else 0


if __name__ == "__main__":
    sys.exit(main())
