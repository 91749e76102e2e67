"""Reconcile step 4, the shared-GPU hook: how many replicas a placed Model runs now.

GPU sharing (issue 13) decides which Model of a GPU group holds the GPU; the reconcile core
only asks. After detectGPU placed a Model and the serverless rule gave its desired replicas,
the planner calls ``SharedGPUHook.arbitrate`` and runs the replicas it answers. A verdict
says why the Model runs fewer than it wants, and becomes its phase (``Preempted``, or
``Pending`` for a Model queued for the GPU) and its Loaded and Ready conditions, with the
verdict's reason and message. ``NoSharing``, the default, changes nothing.

The hook is asked on every reconcile of a placed Model that is neither gated by its cache
nor crash-looping, also when it wants no replica (so that a group can hand the GPU on),
and of a Model that waits for a GPU to free (a group member's verdict then wins over
Pending: the GPU its group holds is what keeps it off; ``placement`` is then empty),
and is built once per controller (``create_app``), so it may keep state across reconciles.
The controller also tells it of the proxies' demand (``observe``), of deleted Models
(``forget``) and of its engines becoming ready or crashing (``engine_event``: a winner that
crashes while loading hands the GPU back).

A Preempted verdict carries the drain grace (``drain_s``): the reconcile withdraws the
loser's endpoints at once and stops its engine only once no request runs on it, or the
grace passed (``core/sharing/drain.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from flexinfer_common.api import Model
from flexinfer_common.api.status import GPUStatus, SharedGroupStatus
from flexinfer_common.bus.topics import ActivityEvent, DemandEvent


class Hold(StrEnum):
    """Why a Model runs fewer replicas than it wants, as its phase tells it."""

    PREEMPTED = "Preempted"
    """Another Model holds the GPU it had (phase Preempted)."""
    QUEUED = "Queued"
    """It waits for a GPU another Model holds (phase Pending)."""


class EngineKind(StrEnum):
    """What happened to an engine."""

    READY = "ready"
    STOPPED = "stopped"
    """It exited because it was stopped."""
    CRASHED = "crashed"
    """It exited unexpectedly (before Ready: it failed to load)."""
    SLEPT = "slept"
    """It was put to sleep (its GPU memory is free; a wake brings it back)."""


@dataclass(frozen=True, slots=True)
class EngineChange:
    """An engine of Model ``key`` (replica ``replica``, started from ``generation``)
    became ready, stopped or crashed."""

    key: str
    replica: str
    generation: int
    kind: EngineKind
    took_s: float | None = None
    """READY: seconds from its start (or its wake) to Ready; SLEPT: the sleep's seconds."""
    woken: bool = False
    """READY: it woke from sleep rather than started."""
    backoff_s: float = 0.0
    """CRASHED: it may not start again for this long (inf: crash-looping)."""


@dataclass(frozen=True, slots=True)
class SharedVerdict:
    """The status a held Model shows: its hold, a condition reason and a message."""

    hold: Hold
    reason: str
    """CamelCase, as condition reasons are (``Preempted``, ``WaitingForGPU``)."""
    message: str
    drain_s: float = 0.0
    """Seconds its running engines may take to finish their requests before they stop
    (0: stop at once)."""
    group: str | None = None
    """The shared group (a label of the swap metrics)."""


@dataclass(frozen=True, slots=True)
class Sharing:
    """The hook's answer: the replicas to run, and why fewer than desired."""

    replicas: int
    verdict: SharedVerdict | None = None
    recheck_s: float | None = None
    """Reconcile the Model again after this many seconds (a cooldown ends, say); None:
    its next event or resync is soon enough."""
    group: SharedGroupStatus | None = None
    """``status.sharedGroup`` of a member of a shared group (None: no group)."""
    waits_for: frozenset[str] = frozenset()
    """The members a swap this Model won evicted and whose engines must free the GPU
    before its own starts (``handover``); empty once it served."""


class SharedGPUHook(Protocol):
    """Arbitrates a GPU between the Models that share it."""

    async def arbitrate(self, model: Model, placement: GPUStatus, desired: int) -> Sharing:
        """The replicas ``model``, placed at ``placement``, runs now of the ``desired``."""
        ...

    def observe(self, event: DemandEvent | ActivityEvent, key: str) -> None:
        """A proxy queued requests for Model ``key``, or ``key`` served some."""
        ...

    def forget(self, key: str) -> None:
        """Model ``key`` was deleted."""
        ...

    def engine_event(self, change: EngineChange) -> None:
        """An engine of a Model became ready, stopped, or crashed."""
        ...


class NoSharing:
    """No arbitration: every Model runs what it wants."""

    async def arbitrate(self, model: Model, placement: GPUStatus, desired: int) -> Sharing:
        """``desired``, without a verdict."""
        return Sharing(desired)

    def observe(self, event: DemandEvent | ActivityEvent, key: str) -> None:
        """Demand changes nothing."""

    def forget(self, key: str) -> None:
        """Nothing kept."""

    def engine_event(self, change: EngineChange) -> None:
        """Engines change nothing."""
