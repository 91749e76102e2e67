"""A stand-in for vLLM's OpenAI server: ``vllm serve MODEL`` and
``python -m vllm.entrypoints.openai.api_server --model MODEL``.

Flags are vLLM's documented ones (``vllm serve --help``) for every setting FlexInfer can
render; anything else is refused with exit 2 as vLLM's parser does, so a wrongly rendered
argv fails the test. A local model path that does not exist is refused too (vLLM would
take it for a Hub id and fail to download it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from flexinfer_testing.backend_servers.http import (
    Reply,
    chat_reply,
    openai_error,
    record_launch,
    serve,
)

_VALUES: tuple[tuple[str, type], ...] = (
    ("--host", str),
    ("--dtype", str),
    ("--max-model-len", str),  # vLLM takes 1k/1K/"auto" too: not an int
    ("--gpu-memory-utilization", float),
    ("--attention-backend", str),
    ("--max-num-seqs", int),
    ("--max-num-batched-tokens", int),
    ("--cpu-offload-gb", float),
    ("--offload-backend", str),
    ("--num-gpu-blocks-override", int),
    ("--tokenizer", str),
    ("--kv-cache-dtype", str),
    ("--tool-call-parser", str),
    ("--reasoning-parser", str),
    ("--speculative-config", str),
    ("--limit-mm-per-prompt", str),
    ("--mm-processor-kwargs", str),
    ("--block-size", int),
    ("--max-loras", int),
)
_SWITCHES = (
    "--trust-remote-code",
    "--enforce-eager",
    "--enable-auto-tool-choice",
    "--disable-log-stats",
    "--enable-lora",
)
_NEGATABLE = ("--enable-prefix-caching", "--disable-hybrid-kv-cache-manager")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


def add_server_args(parser: argparse.ArgumentParser) -> None:
    """The engine and frontend flags ``vllm serve`` and the api_server module share."""
    for flag, kind in _VALUES:
        parser.add_argument(flag, type=kind)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--quantization", "-q")
    parser.add_argument("--served-model-name", nargs="+")
    for flag in _SWITCHES:
        parser.add_argument(flag, action="store_true")
    for flag in _NEGATABLE:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction)


def cli_parser() -> argparse.ArgumentParser:
    """``vllm serve [model_tag] [options]`` (the model may also come as ``--model``)."""
    parser = argparse.ArgumentParser(prog="vllm", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", allow_abbrev=False)
    serve_cmd.add_argument("model_tag", nargs="?")
    serve_cmd.add_argument("--model")
    add_server_args(serve_cmd)
    return parser


def module_parser() -> argparse.ArgumentParser:
    """``python -m vllm.entrypoints.openai.api_server --model M [options]``."""
    parser = argparse.ArgumentParser(prog="api_server", allow_abbrev=False)
    parser.add_argument("--model", default="facebook/opt-125m")
    add_server_args(parser)
    return parser


def run(args: argparse.Namespace, model: str) -> int:
    """Check the model and settings as vLLM would at start, then serve until killed."""
    if args.dtype is not None and args.dtype not in DTYPES:
        print(f"vllm: invalid dtype {args.dtype!r}", file=sys.stderr)
        return 2
    if model.startswith("/") and not Path(model).is_dir():
        print(f"vllm: model path {model} does not exist", file=sys.stderr)
        return 1
    names: list[str] = args.served_model_name or [model]
    created = int(time.time())

    def models() -> Reply:
        data = [{"id": n, "object": "model", "created": created, "owned_by": "vllm",
                 "root": model, "parent": None} for n in names]  # fmt: skip
        return 200, {"object": "list", "data": data}

    def chat(body: dict[str, Any]) -> Reply:
        if body.get("model", names[0]) not in names:
            return openai_error(404, f"The model `{body.get('model')}` does not exist.")
        return chat_reply(str(body.get("model", names[0])), body)

    get = {"/health": lambda: (200, None), "/v1/models": models}
    serve(args.host or "0.0.0.0", args.port, get, {"/v1/chat/completions": chat})
    return 0


def main_cli(argv: list[str], records: str) -> int:
    """The ``vllm`` executable."""
    record_launch(Path(records), "vllm", argv)  # first: a refused argv is worth seeing
    args = cli_parser().parse_args(argv)
    model = args.model_tag or args.model
    if model is None:
        print("vllm serve: a model is required", file=sys.stderr)
        return 2
    return run(args, model)


def main_module(argv: list[str], records: str) -> int:
    """``python -m vllm.entrypoints.openai.api_server``."""
    record_launch(Path(records), "vllm-api-server", argv)
    args = module_parser().parse_args(argv)
    return run(args, args.model)
