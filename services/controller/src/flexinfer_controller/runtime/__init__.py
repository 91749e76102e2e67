"""Runtimes: where engine replicas run (``local`` subprocesses; ``kubernetes`` later)."""

from flexinfer_controller.runtime.base import (
    LogRequest,
    LogsUnsupportedError,
    Replica,
    ReplicaEvent,
    ReplicaListener,
    ReplicaState,
    Runtime,
    SleepUnsupportedError,
)
from flexinfer_controller.runtime.registry import (
    create_inventory,
    create_prestart,
    create_runtime,
    runtime_names,
)

__all__ = [
    "LogRequest",
    "LogsUnsupportedError",
    "Replica",
    "ReplicaEvent",
    "ReplicaListener",
    "ReplicaState",
    "Runtime",
    "SleepUnsupportedError",
    "create_inventory",
    "create_prestart",
    "create_runtime",
    "runtime_names",
]
