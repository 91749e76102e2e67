"""Engine state files: data_dir/engines/<replica>.json, written atomically."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from flexinfer_controller.core.gpu import GPUAssignment

log = logging.getLogger(__name__)


class EngineState(BaseModel):
    """What a restarted controller needs to recognise and adopt an engine."""

    model_config = ConfigDict(extra="ignore")

    replica: str
    pid: int
    create_time: float
    """psutil create_time, so a later process reusing the pid is not mistaken for it."""
    model: str
    generation: int
    state: Literal["starting", "ready", "sleeping"]
    url: str | None = None
    runtime_id: str
    served_name: str = ""
    health_path: str = "/readyz"
    started_at: float = 0.0
    gpus: GPUAssignment | None = None
    """The GPUs it is pinned to: a restarted controller counts them as held."""
    template_hash: str = ""
    """What it was made from (``LaunchSpec.template_hash``), so that a restarted controller
    still carries it over to a new generation of an unchanged rendering."""


class StateDir:
    """The directory of state files of one runtime."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def _file(self, replica: str) -> Path:
        return self.path / f"{replica}.json"

    def write(self, state: EngineState) -> None:
        """Write (or replace) a state file atomically: tmp file, fsync, rename."""
        target = self._file(state.replica)
        tmp = target.with_name(f".{target.name}.tmp")
        data = state.model_dump_json().encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)

    def remove(self, replica: str) -> None:
        """Delete a replica's state file if present."""
        with contextlib.suppress(FileNotFoundError):
            self._file(replica).unlink()

    def read_all(self) -> list[EngineState]:
        """Every readable state file; unreadable ones are logged and deleted."""
        states = []
        for path in sorted(self.path.glob("*.json")):
            try:
                states.append(EngineState.model_validate_json(path.read_bytes()))
            except (OSError, ValidationError, ValueError) as exc:
                log.warning("removing unreadable engine state file %s: %s", path, exc)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        for tmp in self.path.glob(".*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return states
