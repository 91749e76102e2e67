"""Stand-ins for cluster controllers: a pass of ``sync`` after every change on the fake."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from flexinfer_common.testing.kube_apiserver.server import KubeApiServer


@contextlib.asynccontextmanager
async def sync_after_changes(api: KubeApiServer, sync: Callable[[], None]) -> AsyncIterator[None]:
    """Call ``sync`` now and after every change on ``api`` until the block ends (a test
    kubelet or Job controller reacting as the real ones do, without polling)."""
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            seen = api.resource_version
            sync()

            def changed(server: KubeApiServer, seen: int = seen) -> bool:
                return server.resource_version != seen

            with contextlib.suppress(TimeoutError):
                # Woken by the next change; the bound only lets a stop be noticed.
                await api.until(changed, within_s=0.5)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stop.set()
        await task
