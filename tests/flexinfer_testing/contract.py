"""The OpenAI contract's two targets: the reference engine itself, and the same engine
behind the real proxy (``flexinfer proxy --static``).

Each is a real process, started once per session and ready when it is yielded (the
engine's ready line, the proxy's ready file): a contract test that passes on both shows
that the proxy changes nothing a client can see. The fixtures (``contract_engine``,
``contract_proxy`` and ``target``, which is each in turn) are in the root conftest.py;
``start_engine`` and ``start_proxy`` here are what they run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

from flexinfer_testing.clients import sdk
from flexinfer_testing.engines import Process, reference_engine, static_proxy

MODEL = "tiny"
"""The model both targets serve, by the same name."""
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Target:
    """Where a contract test sends its requests."""

    name: str
    url: str
    """The server's root (``http://127.0.0.1:PORT``); the OpenAI base URL is ``url/v1``."""

    @property
    def base_url(self) -> str:
        """The OpenAI SDK's base URL."""
        return f"{self.url}/v1"

    def openai(self) -> openai.OpenAI:
        """An SDK client of this target, without retries."""
        return sdk(self.base_url, TIMEOUT_S)

    def http(self) -> httpx.Client:
        """A plain HTTP client of this target, for what the SDK cannot send."""
        return httpx.Client(base_url=self.url, timeout=TIMEOUT_S)


@contextmanager
def start_engine(model_dir: Path, workdir: Path) -> Iterator[Process]:
    """The reference engine serving ``MODEL`` from ``model_dir``, as its own process."""
    with reference_engine(model_dir, workdir / "engine.log", name=MODEL) as engine:
        yield engine


@contextmanager
def start_proxy(engine: Process, workdir: Path) -> Iterator[Process]:
    """The proxy in front of ``engine``, serving it as ``MODEL``, as its own process."""
    with static_proxy(workdir, {MODEL: engine.url}) as proxy:
        yield proxy
