"""Test hooks: the log of calls (verb, resource, subresource), injected faults, after-actions.

A ``Call`` names what RBAC would check: its API group, resource, subresource and verb.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from flexinfer_common.testing.kube_apiserver.errors import ApiError

ANY = "*"


@dataclass(frozen=True)
class Call:
    """One request as RBAC sees it."""

    verb: str
    """get, list, watch, create, update, patch, delete."""
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None

    @property
    def rbac_resource(self) -> str:
        """``resource`` or ``resource/subresource``, as a Role's rules name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass
class Match:
    """Which calls a hook applies to; ANY (or None for subresource/name) matches everything."""

    verb: str = ANY
    resource: str = ANY
    """A plural (``models``) or ``plural.group`` (``models.ai.flexinfer``)."""
    subresource: str | None = ANY
    name: str | None = ANY

    def __call__(self, call: Call) -> bool:
        """Whether ``call`` matches."""
        qualified = f"{call.resource}.{call.group}" if call.group else call.resource
        return (
            self.verb in (ANY, call.verb)
            and self.resource in (ANY, call.resource, qualified)
            and self.subresource in (ANY, call.subresource)
            and self.name in (ANY, call.name)
        )


@dataclass
class _Fault:
    match: Match
    error: ApiError
    remaining: int


@dataclass
class _After:
    match: Match
    action: Callable[[], object]
    remaining: int


@dataclass
class Hooks:
    """Calls seen, faults to inject and actions to run after matching calls."""

    calls: list[Call] = field(default_factory=list)
    _faults: list[_Fault] = field(default_factory=list)
    _afters: list[_After] = field(default_factory=list)

    def count(self, match: Match | None = None) -> int:
        """How many calls matched (all calls without ``match``)."""
        return sum(1 for c in self.calls if match is None or match(c))

    def inject(self, match: Match, error: ApiError, times: int) -> None:
        """Answer the next ``times`` matching calls with ``error`` instead of handling them."""
        self._faults.append(_Fault(match, error, times))

    def clear_faults(self) -> None:
        """Drop every fault not yet used up."""
        self._faults.clear()

    def after(self, match: Match, action: Callable[[], object], times: int) -> None:
        """Run ``action`` after each of the next ``times`` matching calls was handled."""
        self._afters.append(_After(match, action, times))

    def fault_for(self, call: Call) -> ApiError | None:
        """The injected error this call gets, if any (consumes one use)."""
        for fault in self._faults:
            if fault.remaining > 0 and fault.match(call):
                fault.remaining -= 1
                return fault.error
        return None

    def afters_for(self, call: Call) -> list[Callable[[], object]]:
        """The after-actions due for this call (consumes one use of each)."""
        due = []
        for after in self._afters:
            if after.remaining > 0 and after.match(call):
                after.remaining -= 1
                due.append(after.action)
        return due
