"""One informer per kind and namespace, shared by every loop that follows that kind.

The Model controller's feed, the ModelDeployment bridge and the ModelCache loop all follow
Models or ModelCaches: informers of their own would list and watch the same objects twice
and keep two caches of them. ``SharedInformers`` keeps one ``Informer`` per (kind,
namespace); each loop runs a subscription (``SharedInformer.run``) with its own callback.
The informer runs while any subscription does. A subscription that starts after the
informer listed gets an ADDED for every object already cached (as client-go's
``AddEventHandler`` does), so it misses none; then every change, as the others do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from flexinfer_common.kube.informer import Change, Informer, ListWatch

Subscriber = Callable[[Change], None]


class SharedInformer:
    """One informer and the callbacks of the loops subscribed to it."""

    def __init__(self, source: ListWatch, namespace: str | None, watch_timeout_s: int) -> None:
        self.informer = Informer(
            source, self._fan_out, namespace=namespace, watch_timeout_s=watch_timeout_s
        )
        self._kind = source.kind
        self._subscribers: list[Subscriber] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Whether the informer lists and watches now (some subscription runs)."""
        return self._task is not None and not self._task.done()

    def _fan_out(self, change: Change) -> None:
        for subscriber in list(self._subscribers):
            subscriber(change)

    async def run(self, on_change: Subscriber) -> None:
        """Call ``on_change`` for every object cached and every change, until cancelled."""
        self._subscribers.append(on_change)
        if self.informer.synced.is_set():
            for key in self.informer.keys():  # noqa: SIM118 (an Informer, not a dict)
                found = self.informer.get(key) or {}
                version = str(found.get("metadata", {}).get("resourceVersion", ""))
                on_change(Change(self._kind, "ADDED", key, version))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.informer.run(), name=f"informer-{self._kind}")
        try:
            # Shielded: one subscription ending must not stop the others' informer.
            await asyncio.shield(self._task)
        finally:
            self._subscribers.remove(on_change)
            if not self._subscribers:
                await self._stop()

    async def _stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class SharedInformers:
    """The shared informers of one apiserver, by kind and namespace."""

    def __init__(self, watch_timeout_s: int = 300) -> None:
        self._watch_timeout_s = watch_timeout_s
        self._informers: dict[tuple[str, str | None], SharedInformer] = {}

    def informer(self, source: ListWatch, namespace: str | None) -> SharedInformer:
        """The informer of ``source``'s kind in ``namespace`` (None: all), made on first use
        (from ``source``: the sources of one kind list and watch the same objects)."""
        key = (source.plural, namespace)
        if key not in self._informers:
            self._informers[key] = SharedInformer(source, namespace, self._watch_timeout_s)
        return self._informers[key]

    async def run_all(
        self, sources: list[tuple[ListWatch, str | None]], on_change: Subscriber
    ) -> None:
        """Subscribe ``on_change`` to the informer of each (source, namespace), until
        cancelled."""
        runs = [self.informer(source, namespace).run(on_change) for source, namespace in sources]
        await asyncio.gather(*runs)
