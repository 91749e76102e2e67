"""The GPUGroup loop: keeps the arbiter's GPUGroup index current and writes each status.

Its feed (the apiserver's informer) reports every GPUGroup as stored. The loop puts it in
the ``GPUGroupIndex`` the arbiter reads members and policy from, and when its members,
policy or queue annotations changed, re-queues the member Models (so the arbiter decides
the group again at once: a proxy's queue annotation is demand). Each time the arbiter
decided a group (``SwapHistory``'s listener) and each time a GPUGroup changed, the group's
status is built again (``status.group_status``) and written when it differs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pydantic

from flexinfer_common.api.gpugroup import GPUGroup
from flexinfer_common.api.status import ModelPhase
from flexinfer_common.errors import NotFoundError
from flexinfer_common.store import ModelStore
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.sharing.clock import Clock
from flexinfer_controller.core.sharing.decide import GroupState
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.gpugroups import (
    GROUP_PREFIX,
    GPUGroupIndex,
    GPUGroupSource,
    member_key,
)
from flexinfer_controller.core.workers import Backoff, Tasks
from flexinfer_controller.legacy.gpugroup.status import group_status

log = logging.getLogger(__name__)
Obj = dict[str, Any]
_META = ("name", "namespace", "labels", "annotations", "uid", "generation", "resourceVersion",
         "creationTimestamp", "deletionTimestamp", "finalizers")  # fmt: skip
"""The ObjectMeta fields the API types carry."""


class GroupStatusApi(Protocol):
    """Where GPUGroup statuses are written (``adapters.kube.gpugroups`` implements it)."""

    async def write_group_status(
        self, namespace: str, name: str, resource_version: str, status: Obj
    ) -> None:
        """The whole status through the status subresource, if the version is current."""


class GroupFeed(Protocol):
    """GPUGroups as stored: ``changed(key, object)``, ``object`` None once deleted."""

    async def run(self, changed: Callable[[str, Obj | None], None]) -> None:
        """Report every GPUGroup and every change until cancelled."""


class ArbiterView(Protocol):
    """What the loop reads of the arbiter (``SharedArbiter`` is one)."""

    demand: DemandBook

    def state(self, group: str) -> GroupState | None:
        """What ``group`` holds now."""
        ...


def parse_group(found: Obj) -> GPUGroup:
    """The GPUGroup of a stored object (pydantic.ValidationError when it does not validate)."""
    meta = {k: v for k, v in (found.get("metadata") or {}).items() if k in _META}
    body = {"metadata": meta, "spec": found.get("spec") or {}, "status": found.get("status") or {}}
    return GPUGroup.model_validate(body)


@dataclass
class WallClock:
    """The arbiter's monotonic seconds as wall-clock times (whole seconds, as the API's)."""

    clock: Clock
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _anchor: tuple[float, datetime] | None = None

    def __call__(self, at: float) -> datetime:
        """The wall-clock time of monotonic ``at``."""
        if self._anchor is None:
            self._anchor = (self.clock.now(), self.now())
        mono, wall = self._anchor
        return (wall + timedelta(seconds=at - mono)).replace(microsecond=0)


class GPUGroupLoop:
    """The GPUGroup index's feed and the status writer's queue and workers."""

    def __init__(
        self,
        *,
        api: GroupStatusApi,
        feed: GroupFeed,
        source: GPUGroupSource,
        index: GPUGroupIndex,
        arbiter: ArbiterView,
        store: ModelStore,
        requeue_model: Callable[[str], object],
        wall: Callable[[float], datetime],
    ) -> None:
        self.queue = WorkQueue()
        self._api, self._feed, self._source, self._index = api, feed, source, index
        self._arbiter, self._store, self._requeue_model = arbiter, store, requeue_model
        self._wall = wall
        self._seen: dict[str, tuple[Obj, dict[str, str]]] = {}
        """Each group's spec and annotations as last seen (a status write changes neither)."""
        self._base: dict[str, int] = {}
        """Each group's swapCount when this controller first wrote it."""
        self._backoff = Backoff(max_s=30.0)
        self._tasks = Tasks()
        source.history.listeners.append(self._decided)

    async def start(self) -> None:
        """Start the worker and the feed."""
        self._tasks.spawn_workers(1, self.queue, self.reconcile, self._backoff, "gpugroup")
        self._tasks.spawn(self._feed.run(self.changed), "gpugroup-feed")

    async def stop(self) -> None:
        """Stop both."""
        self.queue.shut_down()
        await self._tasks.cancel()

    def _decided(self, group: str) -> None:
        if group.startswith(GROUP_PREFIX):
            self.queue.add(group.removeprefix(GROUP_PREFIX))

    def changed(self, key: str, found: Obj | None) -> None:
        """GPUGroup ``key`` is now ``found`` (None: deleted)."""
        old = self._index.get(key)
        group: GPUGroup | None = None
        if found is not None:
            try:
                group = parse_group(found)
            except pydantic.ValidationError as exc:
                log.warning("gpugroup %s is invalid and not arbitrated: %s", key, exc)
        if group is None:
            self._index.remove(key)
            self._seen.pop(key, None)
        else:
            self._index.put(group)
            seen = (found or {}).get("spec") or {}, dict(group.metadata.annotations)
            if self._seen.get(key) == seen:
                self.queue.add(key)
                return  # only its status changed (our own write, most likely)
            self._seen[key] = seen
        for model in {*_members(old), *_members(group)}:
            self._requeue_model(model)
        self.queue.add(key)

    async def reconcile(self, key: str) -> None:
        """Write GPUGroup ``key``'s status when it differs from the stored one."""
        group = self._index.get(key)
        if group is None or group.metadata.resource_version is None:
            return
        name = GROUP_PREFIX + key
        policy = self._source.policy(name)
        window = policy.demand_window_s if policy is not None else 0.0
        keys = [member_key(group, m) for m in group.spec.models]
        phases = {k: await self._phase(k) for k in keys}
        queues = {k: self._arbiter.demand.queue(k, window) for k in keys}
        history = self._source.history.groups.get(name)
        status = group_status(group, self._arbiter.state(name), history, phases, queues, self._wall)
        # A restarted controller counts on from the stored count.
        status.swap_count += self._base.setdefault(key, group.status.swap_count)
        dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if dumped == group.status.model_dump(mode="json", by_alias=True, exclude_none=True):
            return
        namespace, name_ = group.metadata.namespace, group.metadata.name
        await self._api.write_group_status(
            namespace, name_, group.metadata.resource_version, dumped
        )

    async def _phase(self, key: str) -> ModelPhase | None:
        namespace, _, name = key.partition("/")
        try:
            return (await self._store.get_model(namespace, name)).status.phase
        except NotFoundError:
            return None


def _members(group: GPUGroup | None) -> list[str]:
    return [member_key(group, m) for m in group.spec.models] if group is not None else []
