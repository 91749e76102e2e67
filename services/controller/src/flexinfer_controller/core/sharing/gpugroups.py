"""v1alpha1 GPUGroups as arbiter groups: members from the resource, its own policy.

A GPUGroup lists ModelDeployments (``spec.models[]``, namespace defaulting to the group's);
the bridge serves each through the Model of the same namespace/name, so those Models form
the arbiter group ``gpugroup:<namespace>/<name>``. Each member's ``priority`` and (when
set) ``vramEstimateMB`` override the Model's, and the group's swaps are gated by
``gpugroup_policy(spec.antiThrashing)``; a Model's own ``gpu.swapCooldown`` does not apply
(the group's ``minimumRunDurationSeconds`` does). A Model two GPUGroups list belongs to the
first by namespace/name.

The proxies write their queues on the GPUGroup (``flexinfer.ai/queue.<model>`` = depth,
``flexinfer.ai/queue-since.<model>`` = RFC3339); every decision reads them again into the
DemandBook (``DemandBook.asserted``), so a controller without the bus sees the demand too.

``GPUGroupIndex`` holds the groups as the apiserver's informer last saw them (the local
store has no GPUGroup kind: there it stays empty). ``SwapHistory`` counts each group's swaps
for its status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flexinfer_common.api import Model
from flexinfer_common.api.gpugroup import GPUGroup, GPUGroupMember, GPUGroupSpec
from flexinfer_common.errors import NotFoundError
from flexinfer_common.store import ModelStore
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.core.sharing.clock import Clock
from flexinfer_controller.core.sharing.decide import Outcome, Swap
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.groups import Membership
from flexinfer_controller.core.sharing.policy import SwapPolicy, gpugroup_policy

GROUP_PREFIX = "gpugroup:"
"""Arbiter group names of GPUGroups: never taken for a ``gpu.shared`` name by accident."""
QUEUE_ANNOTATION = "flexinfer.ai/queue."
"""``flexinfer.ai/queue.<model>``: requests a proxy holds for member ``<model>`` (a count)."""
QUEUE_SINCE_ANNOTATION = "flexinfer.ai/queue-since."
"""``flexinfer.ai/queue-since.<model>``: since when (RFC3339)."""

PolicyOf = Callable[[GPUGroupSpec], SwapPolicy]
"""A GPUGroup's policy from its spec."""


def spec_policy(spec: GPUGroupSpec) -> SwapPolicy:
    """``gpugroup_policy`` of ``spec.antiThrashing``, draining by ``spec.scalingPolicy``."""
    return gpugroup_policy(spec.anti_thrashing, scaling=spec.scaling_policy)


def group_name(group: GPUGroup) -> str:
    """The arbiter group of ``group``."""
    return f"{GROUP_PREFIX}{group.metadata.namespace}/{group.metadata.name}"


def member_key(group: GPUGroup, member: GPUGroupMember) -> str:
    """The namespace/name of the Model serving ``member``."""
    return f"{member.namespace or group.metadata.namespace}/{member.name}"


def queue_depth(group: GPUGroup, member: GPUGroupMember) -> int:
    """The depth a proxy wrote on ``group`` for ``member`` (0: none, or unreadable)."""
    text = group.metadata.annotations.get(QUEUE_ANNOTATION + member.name, "")
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def as_member(model: Model, member: GPUGroupMember) -> Model:
    """``model`` with the group's priority and VRAM estimate, and no swap cooldown of its
    own (the group's minimum run duration gates it)."""
    gpu = model.spec.gpu_or_default
    update: dict[str, object] = {"priority": member.priority, "swap_cooldown": None}
    if member.vram_estimate_mb is not None:
        update["vram_estimate_mb"] = member.vram_estimate_mb
    spec = model.spec.model_copy(update={"gpu": gpu.model_copy(update=update)})
    return model.model_copy(update={"spec": spec})


class GPUGroupIndex:
    """The GPUGroups the apiserver holds, by namespace/name."""

    def __init__(self) -> None:
        self._groups: dict[str, GPUGroup] = {}

    def put(self, group: GPUGroup) -> None:
        """``group`` was created or changed."""
        self._groups[f"{group.metadata.namespace}/{group.metadata.name}"] = group

    def remove(self, key: str) -> GPUGroup | None:
        """The GPUGroup ``key`` (namespace/name) is gone; what it was."""
        return self._groups.pop(key, None)

    def get(self, key: str) -> GPUGroup | None:
        """The GPUGroup ``key`` (namespace/name), or None."""
        return self._groups.get(key)

    def named(self, name: str) -> GPUGroup | None:
        """The GPUGroup of arbiter group ``name`` (None: not a GPUGroup's, or gone)."""
        if not name.startswith(GROUP_PREFIX):
            return None
        return self._groups.get(name.removeprefix(GROUP_PREFIX))

    def holding(self, model_key: str) -> tuple[GPUGroup, GPUGroupMember] | None:
        """The first GPUGroup (by namespace/name) listing Model ``model_key``, and its entry."""
        for key in sorted(self._groups):
            group = self._groups[key]
            for member in group.spec.models:
                if member_key(group, member) == model_key:
                    return group, member
        return None


@dataclass(slots=True)
class GroupHistory:
    """A GPUGroup's swaps as this controller saw them."""

    count: int = 0
    last: Swap | None = None


@dataclass(slots=True)
class SwapHistory:
    """Swaps per arbiter group, and who to tell when a group was decided."""

    groups: dict[str, GroupHistory] = field(default_factory=dict)
    listeners: list[Callable[[str], object]] = field(default_factory=list)

    def record(self, group: str, outcome: Outcome) -> None:
        """Count ``outcome``'s swaps and tell the listeners."""
        found = self.groups.setdefault(group, GroupHistory())
        found.count += len(outcome.swaps)
        if outcome.swaps:
            found.last = outcome.swaps[-1]
        for listener in self.listeners:
            listener(group)


class GPUGroupSource:
    """The arbiter's ``GroupSource`` for v1alpha1 GPUGroups (see the module's docstring)."""

    def __init__(
        self,
        index: GPUGroupIndex,
        store: ModelStore,
        demand: DemandBook,
        policy_of: PolicyOf = spec_policy,
        history: SwapHistory | None = None,
    ) -> None:
        self._index = index
        self._store = store
        self._demand = demand
        self._policy_of = policy_of
        self.history = history or SwapHistory()
        self._asserted: set[str] = set()
        """Members whose annotated queue the book holds (told 0 once it is gone)."""

    async def group_of(self, model: Model) -> Membership | None:
        """The GPUGroup listing ``model``, and ``model`` with its entry's overrides."""
        found = self._index.holding(model.key)
        if found is None:
            return None
        group, member = found
        return Membership(group_name(group), as_member(model, member))

    async def members(self, group: str) -> Sequence[Model] | None:
        """The live Models of ``group``'s entries (none once the GPUGroup is gone); their
        annotated queues are read into the DemandBook first."""
        found = self._index.named(group)
        if found is None:
            return []
        models: list[Model] = []
        for member in found.spec.models:
            key = member_key(found, member)
            self._assert_queue(key, queue_depth(found, member))
            namespace, _, name = key.partition("/")
            try:
                model = await self._store.get_model(namespace, name)
            except NotFoundError:
                continue  # its ModelDeployment is not bridged (yet)
            if model.metadata.deletion_timestamp is None:
                models.append(as_member(model, member))
        return models

    def policy(self, group: str) -> SwapPolicy | None:
        """The GPUGroup's policy (``spec_policy``: its antiThrashing and scalingPolicy)."""
        found = self._index.named(group)
        return self._policy_of(found.spec) if found is not None else None

    def decided(self, group: str, outcome: Outcome) -> None:
        """Recorded in ``history`` (its listeners write the GPUGroup's status)."""
        self.history.record(group, outcome)

    def _assert_queue(self, key: str, depth: int) -> None:
        if depth > 0:
            self._demand.asserted(key, depth)
            self._asserted.add(key)
        elif key in self._asserted:
            self._demand.asserted(key, 0)
            self._asserted.discard(key)


@dataclass(slots=True)
class GPUGroupWiring:
    """What the arbiter and the GPUGroup loop share: the index the loop fills, the swap
    history it writes statuses from, and (once built) the arbiter, its GPUGroup source and
    clock. Without an arbiter (sharing off) the loop has nothing to run."""

    index: GPUGroupIndex = field(default_factory=GPUGroupIndex)
    history: SwapHistory = field(default_factory=SwapHistory)
    source: GPUGroupSource | None = None
    arbiter: SharedArbiter | None = None
    clock: Clock | None = None
