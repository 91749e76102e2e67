"""A stand-in for ``ollama serve``: OLLAMA_HOST names the address, models are pulled by name.

``ollama serve`` takes no flags (anything else exits 2, as a bad argv fails the test). It
serves the routes the controller's Ollama plugin and a client use: ``/``, ``/api/version``,
``/api/tags``, ``/api/pull`` (nothing is downloaded), ``/api/copy`` and the OpenAI
``/v1/chat/completions``, which answers 404 for a model not pulled.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path
from typing import Any

from flexinfer_testing.backend_servers.http import (
    Reply,
    chat_reply,
    openai_error,
    record_launch,
    serve,
)

DEFAULT_PORT = 11434


def bind_address(value: str) -> tuple[str, int]:
    """OLLAMA_HOST as Ollama reads it: [scheme://]host[:port], port 11434 by default."""
    value = value.split("://", 1)[-1].rstrip("/") or "127.0.0.1"
    host, sep, port = value.rpartition(":")
    return (host, int(port)) if sep else (value, DEFAULT_PORT)


def full_name(name: str) -> str:
    """Ollama's model names: a name without a tag means ``:latest``."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


class Models:
    """The models this server holds (pulled or copied), by full name."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def pull(self, body: dict[str, Any]) -> Reply:
        """POST /api/pull: non-streamed, one status line when done."""
        name = body.get("model") or body.get("name")
        if not isinstance(name, str) or not name:
            return 400, {"error": "model is required"}
        with self._lock:
            self._names.add(full_name(name))
        return 200, {"status": "success"}

    def copy(self, body: dict[str, Any]) -> Reply:
        """POST /api/copy: 200 with no body, 404 when the source is not held."""
        source, destination = body.get("source"), body.get("destination")
        if not isinstance(source, str) or not isinstance(destination, str):
            return 400, {"error": "source and destination are required"}
        with self._lock:
            if full_name(source) not in self._names:
                return 404, {"error": f"model '{source}' not found"}
            self._names.add(full_name(destination))
        return 200, None

    def tags(self) -> Reply:
        """GET /api/tags."""
        with self._lock:
            names = sorted(self._names)
        return 200, {"models": [{"name": n, "model": n, "size": 0} for n in names]}

    def chat(self, body: dict[str, Any]) -> Reply:
        """POST /v1/chat/completions for a held model."""
        name = body.get("model")
        with self._lock:
            held = isinstance(name, str) and full_name(name) in self._names
        if not held:
            return openai_error(404, f'model "{name}" not found, try pulling it first')
        return chat_reply(str(name), body)


def main(argv: list[str], records: str) -> int:
    """``ollama serve``."""
    record_launch(Path(records), "ollama", argv, env=("OLLAMA_HOST", "OLLAMA_KEEP_ALIVE"))
    parser = argparse.ArgumentParser(prog="ollama", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve", allow_abbrev=False)
    parser.parse_args(argv)
    host, port = bind_address(os.environ.get("OLLAMA_HOST", ""))
    models = Models()
    get = {"/": lambda: (200, "Ollama is running"),
           "/api/version": lambda: (200, {"version": "0.0.0-standin"}),
           "/api/tags": models.tags}  # fmt: skip
    post = {"/api/pull": models.pull, "/api/copy": models.copy,
            "/v1/chat/completions": models.chat}  # fmt: skip
    serve(host, port, get, post)
    return 0
