"""A stand-in for vLLM's OpenAI server: ``vllm serve MODEL`` and
``python -m vllm.entrypoints.openai.api_server --model MODEL``.

Flags are vLLM's documented ones (``vllm serve --help``) for every setting FlexInfer can
render; anything else is refused with exit 2 as vLLM's parser does, so a wrongly rendered
argv fails the test. A local model path that does not exist is refused too (vLLM would
take it for a Hub id and fail to download it).

LoRA adapters load and unload at runtime as vLLM's server does it (its
``OpenAIServingModels``): the routes exist only with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``
set, a load needs ``--enable-lora`` and a directory with ``adapter_config.json`` whose rank
fits ``--max-lora-rank``, and the answers carry vLLM's status codes and messages. Loaded
adapters are listed by ``/v1/models`` (``parent``: the base model) and served by chat.
Run as a pod's container (``pods.running_pod_engines``), the container's volume mounts are
``FLEXINFER_STANDIN_MOUNTS`` (a JSON object: container path -> host directory), which
paths given to it are read through.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
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
    ("--max-lora-rank", int),
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
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM's ``--max-lora-rank`` accepts (16 when not given)."""


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
    if args.max_lora_rank is not None and args.max_lora_rank not in LORA_RANKS:
        print(f"vllm: invalid max_lora_rank {args.max_lora_rank}", file=sys.stderr)
        return 2
    names: list[str] = args.served_model_name or [model]
    created = int(time.time())
    loras = Loras(args, names[0])

    def models() -> Reply:
        data = [{"id": n, "object": "model", "created": created, "owned_by": "vllm",
                 "root": model, "parent": None} for n in names]  # fmt: skip
        return 200, {"object": "list", "data": data + loras.cards(created)}

    def chat(body: dict[str, Any]) -> Reply:
        name = body.get("model", names[0])
        if name not in names and not loras.has(name):
            return openai_error(404, f"The model `{body.get('model')}` does not exist.")
        return chat_reply(str(name), body)

    get = {"/health": lambda: (200, None), "/v1/models": models}
    post = {"/v1/chat/completions": chat}
    if os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true"):
        post |= {"/v1/load_lora_adapter": loras.load, "/v1/unload_lora_adapter": loras.unload}
    serve(args.host or "0.0.0.0", args.port, get, post)
    return 0


MOUNTS_ENV = "FLEXINFER_STANDIN_MOUNTS"


class Loras:
    """The adapters loaded at runtime, by name (vLLM's ``lora_requests``)."""

    def __init__(self, args: argparse.Namespace, base: str) -> None:
        self._enabled = bool(args.enable_lora)
        self._max_rank: int = args.max_lora_rank or 16
        self._base = base
        self._paths: dict[str, str] = {}
        self._lock = threading.Lock()  # the server answers each request on its own thread
        self._mounts: dict[str, str] = json.loads(os.environ.get(MOUNTS_ENV) or "{}")

    def has(self, name: object) -> bool:
        """Whether an adapter of that name is loaded."""
        with self._lock:
            return name in self._paths

    def cards(self, created: int) -> list[dict[str, Any]]:
        """One /v1/models card per loaded adapter."""
        with self._lock:
            loaded = sorted(self._paths.items())
        return [{"id": name, "object": "model", "created": created, "owned_by": "vllm",
                 "root": path, "parent": self._base} for name, path in loaded]  # fmt: skip

    def load(self, body: dict[str, Any]) -> Reply:
        """POST /v1/load_lora_adapter {"lora_name", "lora_path"}."""
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return _invalid("Both 'lora_name' and 'lora_path' must be provided.")
        with self._lock:
            if name in self._paths:
                return _invalid(f"The lora adapter '{name}' has already been loaded.")
        refused = self._check(str(name), str(path))
        if refused is not None:
            return refused
        with self._lock:
            self._paths[str(name)] = str(path)
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def _check(self, name: str, path: str) -> Reply | None:
        """What the engine's add_lora would raise, as the server answers it."""
        if not self._enabled:
            return _error(400, "BadRequestError", "LoRA is not enabled. Use --enable-lora.")
        config = os.path.join(self._on_host(path), "adapter_config.json")
        try:
            with open(config) as fh:
                rank = int(json.load(fh).get("r", 8))
        except (OSError, ValueError):
            message = f"Loading lora {name} failed: No adapter found for {path}"
            return _error(404, "NotFoundError", message)
        if rank > self._max_rank:
            message = f"LoRA rank {rank} is greater than max_lora_rank {self._max_rank}."
            return _error(400, "BadRequestError", message)
        return None

    def _on_host(self, path: str) -> str:
        """Where a path in the container is on this machine (through the mounts)."""
        for inside, host in self._mounts.items():
            if path == inside or path.startswith(inside.rstrip("/") + "/"):
                return host + path[len(inside.rstrip("/")) :]
        return path

    def unload(self, body: dict[str, Any]) -> Reply:
        """POST /v1/unload_lora_adapter {"lora_name"}."""
        name = body.get("lora_name")
        if not name and not body.get("lora_int_id"):
            return _invalid("either 'lora_name' and 'lora_int_id' needs to be provided.")
        with self._lock:
            if self._paths.pop(str(name), None) is None:
                return _error(404, "NotFoundError", f"The lora adapter '{name}' cannot be found.")
        return 200, f"Success: LoRA adapter '{name}' removed successfully."


def _invalid(message: str) -> Reply:
    return _error(400, "InvalidUserInput", message)


def _error(status: int, kind: str, message: str) -> Reply:
    """vLLM's ErrorResponse: a flat object (message, type, code), not OpenAI's envelope."""
    return status, {"object": "error", "message": message, "type": kind, "param": None,
                    "code": status}  # fmt: skip


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
