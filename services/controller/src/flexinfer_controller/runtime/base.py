"""The Runtime interface: start, stop, list and adopt engine replicas; report their exits."""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import StrEnum

from flexinfer_common.api import Model
from flexinfer_common.api.status import GPUStatus
from flexinfer_common.errors import PermanentError
from flexinfer_controller.backends import LaunchSpec, SleepEndpoints
from flexinfer_controller.core.cache import ModelCache, Notify
from flexinfer_controller.core.gpu import GPUAssignment, GPUInventory, Hold


class ReplicaState(StrEnum):
    """Lifecycle of one replica as the runtime sees it."""

    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    SLEEPING = "sleeping"
    """Its engine sleeps (weights offloaded or dropped): not serving, holding no GPU memory,
    and not in ``Runtime.list``; ``Runtime.wake`` makes it READY again."""


@dataclass(frozen=True, slots=True)
class Replica:
    """A snapshot of one engine replica."""

    id: str
    model: str
    """namespace/name of the Model it serves."""
    generation: int
    """metadata.generation of the spec it was started from."""
    state: ReplicaState
    url: str | None = None
    pid: int | None = None
    node: str | None = None
    started_at: float = 0.0
    """Wall-clock start time (seconds since the epoch)."""
    ready_at: float | None = None
    """Wall-clock time it became ready (for adopted replicas: when it was adopted)."""
    gpus: GPUAssignment | None = None
    """The GPUs the runtime pinned it to (local mode); None: not pinned."""


@dataclass(frozen=True, slots=True)
class ReplicaEvent:
    """Something happened to a replica: it became ready, or it exited."""

    kind: str
    """``ready``, ``exited`` or ``slept`` (its GPUs are free, its process lives on)."""
    replica: Replica
    expected: bool = True
    """False for a crash, a failed start or a startup timeout."""
    message: str = ""
    took_s: float | None = None
    """``slept``: how long the sleep call took; ``ready`` after a wake: how long the wake
    took (None on a start: ``ready_at - started_at`` tells that)."""

    @property
    def woken(self) -> bool:
        """A ``ready`` that ends a wake, not a start."""
        return self.kind == "ready" and self.took_s is not None


ReplicaListener = Callable[[ReplicaEvent], None]
"""Called on the event loop for every ReplicaEvent; must not block."""


@dataclass(frozen=True, slots=True)
class LogRequest:
    """Which part of a replica's captured output to read."""

    follow: bool = False
    """Keep streaming what the replica writes until it is gone (or the reader leaves)."""
    tail_lines: int | None = None
    """Start this many lines before the end (None: from the beginning)."""


class LogsUnsupportedError(PermanentError):
    """The runtime keeps no output of its replicas."""


class SleepUnsupportedError(PermanentError):
    """The runtime cannot put its replicas to sleep."""


class Runtime(ABC):
    """Runs engine replicas. Every method is called from the event loop."""

    name: str = ""
    sleeps: bool = False
    """Whether ``sleep`` and ``wake`` work here (the local runtime's, and the kubernetes
    runtime's where ``sleep_refusal`` allows)."""

    @abstractmethod
    async def adopt(self) -> list[Replica]:
        """Take over replicas a previous controller left running; clean up the rest."""

    @abstractmethod
    async def start(self, model: str, generation: int, spec: LaunchSpec) -> Replica:
        """Launch one replica; returns at once in STARTING, a ``ready`` event follows."""

    def renew(self, model: str, generation: int, template_hash: str) -> bool:
        """Replicas of ``model`` made from ``template_hash`` (``LaunchSpec.template_hash``)
        serve ``generation`` from now; whether any was carried over.

        A new generation that renders the same replicas (only ``spec.serverless`` changed:
        replicas, timeouts) then replaces none of them. The kubernetes runtime does this
        through its Deployment's template hash and generation annotation instead.
        """
        return False

    @abstractmethod
    async def stop(self, replica_id: str) -> None:
        """Begin stopping a replica (it leaves ``list`` at once); an ``exited`` event follows."""

    @abstractmethod
    async def wait_stopped(self, replica_id: str, timeout_s: float) -> bool:
        """Wait until the replica's process is gone; False on timeout."""

    @abstractmethod
    def list(self, model: str | None = None) -> list[Replica]:
        """Live replicas (STARTING or READY), of one model or all."""

    async def sleep(
        self, replica_id: str, routes: SleepEndpoints, level: int, timeout_s: float
    ) -> Replica | None:
        """Put a READY replica to sleep (POST ``routes.sleep?level=``): SLEEPING after, its
        GPU memory free. None when it could not (it is left as it was: stop it)."""
        raise SleepUnsupportedError(f"the {self.name} runtime cannot put replicas to sleep")

    async def wake(
        self, replica_id: str, routes: SleepEndpoints, timeout_s: float
    ) -> Replica | None:
        """Wake a SLEEPING replica (POST ``routes.wake``): READY again, the same process.
        None when it could not (stop it: its state is unknown)."""
        raise SleepUnsupportedError(f"the {self.name} runtime cannot wake replicas")

    def sleepers(self, model: str | None = None) -> builtins.list[Replica]:
        """SLEEPING replicas, of one model or all (none where the runtime cannot sleep)."""
        return []

    def sleep_refusal(self, replica: Replica) -> str | None:
        """Why ``replica`` may not sleep here (its Model's engines stop instead); None: it
        may. A runtime that sleeps only where a sleep frees something says so per replica."""
        return None if self.sleeps else f"the {self.name} runtime cannot put replicas to sleep"

    def gpu_busy(self, model: str) -> bool:
        """Whether an engine of ``model`` may still hold its GPU: live, or stopping and not
        yet gone; a sleeping one does not (its sleep gave the memory back)."""
        return bool(self.list(model))

    def gpu_inventory(self) -> GPUInventory | None:
        """The fleet this runtime watches for detectGPU; None: the plugin's own (local
        mode's declared GPUs)."""
        return None

    def gpu_holds(self) -> builtins.list[Hold] | None:
        """The GPUs this runtime's replicas hold, stopping ones included (their memory is
        not free before they exit); None: the runtime pins no GPUs (the cluster's scheduler
        and device plugins do)."""
        return None

    def model_cache(self, notify: Notify) -> ModelCache | None:
        """Where this runtime's remote sources are fetched, re-queueing through ``notify``;
        None: the plugin's own (local mode's registry download)."""
        return None

    async def ensure(self, model: Model, gpu: GPUStatus | None) -> None:
        """ensureService and ensureDeployment: keep what the Model's replicas are made from
        converged at every reconcile, also while none runs.

        ``gpu`` is where detectGPU placed the Model (None: not placed). Called after the
        reconcile's starts and stops; it never changes how many replicas run. Local replicas
        need nothing made ahead of a start.
        """
        return  # a hook most runtimes do not need

    async def prune(self, model: str) -> builtins.list[str]:
        """Post-reconcile: delete what failed replicas of ``model`` left behind; their ids.

        Local replicas leave nothing behind; on Kubernetes a failed pod (evicted,
        OOM-killed) stays until deleted, long after its ReplicaSet replaced it.
        """
        return []

    async def release(self, model: str) -> None:
        """The Model is gone: remove what the runtime made for it besides its replicas.

        Called after every replica of ``model`` was stopped. Local replicas leave nothing
        behind; the kubernetes runtime deletes the Model's Deployment, Service and the rest.
        """
        return  # a hook most runtimes do not need

    @abstractmethod
    async def close(self, *, stop_replicas: bool) -> None:
        """Stop watching; stop every replica too when ``stop_replicas``."""

    def log_replicas(self, model: str) -> builtins.list[Replica]:
        """Replicas of ``model`` whose output ``logs`` can read, newest first."""
        return sorted(self.list(model), key=lambda r: r.started_at, reverse=True)

    def logs(self, replica: Replica, request: LogRequest) -> AsyncIterator[bytes]:
        """The replica's captured stdout and stderr, as chunks of bytes.

        ``replica`` must come from ``log_replicas``: a runtime reads only what it captured
        itself for a replica it knows. Errors (no such log) raise here, before the first
        chunk, so that a caller can still answer them with a status.
        """
        raise LogsUnsupportedError(f"the {self.name} runtime keeps no replica logs")
