"""A stand-in for llama-cpp-python's server: ``python -m llama_cpp.server``.

Its flags are the server's settings fields as ``--field_name`` (llama_cpp.server.settings:
ModelSettings and ServerSettings; booleans take true/false), for every setting FlexInfer
can map onto; an unknown flag exits 2 as its argparse does. The model file must exist, as
``Llama(model_path=...)`` requires, though it is never read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from flexinfer_testing.backend_servers.http import Reply, chat_reply, record_launch, serve

_INTS = ("--n_gpu_layers", "--main_gpu", "--seed", "--n_ctx", "--n_batch", "--n_ubatch",
         "--n_threads", "--n_threads_batch", "--port")  # fmt: skip
_STRS = ("--model", "--model_alias", "--chat_format", "--clip_model_path", "--host",
         "--api_key", "--config_file")  # fmt: skip
_BOOLS = ("--flash_attn", "--embedding", "--use_mmap", "--use_mlock", "--verbose")


def parse_bool(value: str) -> bool:
    """llama_cpp.server.cli.parse_bool_arg: true/false, 1/0, yes/no."""
    lowered = value.lower()
    if lowered in ("true", "1", "yes", "y"):
        return True
    if lowered in ("false", "0", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {value!r}")


def parser() -> argparse.ArgumentParser:
    """The server's CLI: one ``--field`` per settings field."""
    out = argparse.ArgumentParser(prog="python -m llama_cpp.server", allow_abbrev=False)
    for flag in _INTS:
        out.add_argument(flag, type=int)
    for flag in _STRS:
        out.add_argument(flag)
    for flag in _BOOLS:
        out.add_argument(flag, type=parse_bool)
    return out


def main(argv: list[str], records: str) -> int:
    """Parse, check the model file, then serve /v1/models and /v1/chat/completions."""
    record_launch(Path(records), "llama_cpp.server", argv)
    args = parser().parse_args(argv)
    if args.model is None or not Path(args.model).is_file():
        print(f"ValueError: Model path does not exist: {args.model}", file=sys.stderr)
        return 1
    alias: str = args.model_alias or args.model
    created = int(time.time())

    def models() -> Reply:
        entry = {"id": alias, "object": "model", "owned_by": "me", "permissions": []}
        return 200, {"object": "list", "data": [entry | {"created": created}]}

    def chat(body: dict[str, Any]) -> Reply:
        # One model loaded: its proxy answers any requested name with the default alias.
        return chat_reply(alias, body)

    host = args.host or "localhost"
    serve(host, args.port or 8000, {"/v1/models": models}, {"/v1/chat/completions": chat})
    return 0
