"""Where the arbiter learns a Model's group, the group's members and the group's policy.

Two kinds of group share a GPU (issue 13): the v1alpha2 ``spec.gpu.shared`` groups
(``SharedGroups``: a group is every Model naming it, with the v1alpha2 policy) and the
v1alpha1 GPUGroup resources (``core.sharing.gpugroups``: a group is the ModelDeployments a
GPUGroup lists, with its own ``spec.antiThrashing``). ``ChainedGroups`` asks each source in
turn, so a Model a GPUGroup lists belongs to that GPUGroup whatever its ``gpu.shared``
says, and looks each group's policy up in the source that named the group: the arbiter
holds no table of kinds and no branch per kind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from flexinfer_common.api import Model
from flexinfer_controller.core.sharing.decide import Outcome
from flexinfer_controller.core.sharing.policy import SwapPolicy

GroupMembers = Callable[[str], Awaitable[Sequence[Model]]]
"""The Models whose ``gpu.shared`` is the given group."""


@dataclass(frozen=True, slots=True)
class Membership:
    """A Model's group, and the Model as that group sees it (its overrides applied)."""

    group: str
    model: Model


class GroupSource(Protocol):
    """Groups of one kind: who is in them and which policy gates their swaps."""

    async def group_of(self, model: Model) -> Membership | None:
        """The group ``model`` belongs to (None: none of this source's)."""
        ...

    async def members(self, group: str) -> Sequence[Model] | None:
        """The live members of ``group`` (overrides applied); None: only those the arbiter
        was asked about."""
        ...

    def policy(self, group: str) -> SwapPolicy | None:
        """The anti-thrashing policy of ``group``; None: not one of this source's groups."""
        ...

    def decided(self, group: str, outcome: Outcome) -> None:
        """The arbiter decided ``group`` again (its holders may have changed)."""
        ...


class SharedGroups:
    """``spec.gpu.shared`` groups: every Model naming the group, one policy for all."""

    def __init__(self, policy: SwapPolicy, members: GroupMembers | None = None) -> None:
        self._policy = policy
        self._members = members

    async def group_of(self, model: Model) -> Membership | None:
        """``model``'s ``gpu.shared``, the Model as it is."""
        name = model.spec.gpu_or_default.shared
        return Membership(name, model) if name else None

    async def members(self, group: str) -> Sequence[Model] | None:
        """The Models ``members`` lists for ``group`` (None without it)."""
        return await self._members(group) if self._members is not None else None

    def policy(self, group: str) -> SwapPolicy:
        """The one v1alpha2 policy."""
        return self._policy

    def decided(self, group: str, outcome: Outcome) -> None:
        """Nothing to record."""


class ChainedGroups:
    """Several sources, asked in order; each group's policy comes from its own source."""

    def __init__(self, sources: Sequence[GroupSource], fallback: SwapPolicy) -> None:
        self._sources = list(sources)
        self._fallback = fallback
        self._owner: dict[str, GroupSource] = {}
        """The source that named each group (so members, policy and news go back to it)."""

    async def group_of(self, model: Model) -> Membership | None:
        """The first source's group of ``model``."""
        for source in self._sources:
            found = await source.group_of(model)
            if found is not None:
                self._owner[found.group] = source
                return found
        return None

    async def members(self, group: str) -> Sequence[Model] | None:
        """The owning source's members of ``group``."""
        owner = self._owner.get(group)
        return await owner.members(group) if owner is not None else None

    def policy(self, group: str) -> SwapPolicy:
        """The owning source's policy of ``group`` (the fallback before any owns it)."""
        owner = self._owner.get(group)
        found = owner.policy(group) if owner is not None else None
        return found if found is not None else self._fallback

    def decided(self, group: str, outcome: Outcome) -> None:
        """Tell the owning source."""
        owner = self._owner.get(group)
        if owner is not None:
            owner.decided(group, outcome)
