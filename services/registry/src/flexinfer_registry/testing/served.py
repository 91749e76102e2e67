"""A whole registry (REST and gRPC) served on loopback for a test, with its token helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import OneProvider, ScriptedProvider


@dataclass(frozen=True)
class ServedRegistry:
    """Where a served registry answers."""

    grpc_address: str
    url: str


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """gRPC call metadata carrying ``token``."""
    return (("authorization", f"Bearer {token}"),)


def token_file(path: Path, token: str) -> Path:
    """A token file as operators mount one for rotation (a comment, then the token), 0600."""
    path.write_text(f"# rotation\n{token}\n")
    path.chmod(0o600)
    return path


@asynccontextmanager
async def served_registry(
    settings: RegistrySettings, files: Mapping[str, bytes]
) -> AsyncIterator[ServedRegistry]:
    """The registry of ``settings``, whose one provider serves ``files`` for any model."""
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider(dict(files))))
    async with serve_in_background(app) as url:
        yield ServedRegistry(str(app.state.grpc_address), url)
