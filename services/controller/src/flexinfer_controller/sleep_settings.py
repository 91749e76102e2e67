"""Sleep instead of stop (``FLEXINFER_CONTROLLER_SLEEP_*``): docs/gpu-sharing.md, "Sleep"."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_controller.core.sleepbook import SleepPolicy


def _level(value: object) -> object:
    """The environment gives "2"; a Literal of ints accepts only the int itself."""
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


SleepLevel = Annotated[Literal[1, 2], BeforeValidator(_level)]


class SleepSettings(BaseSettings):
    """When the controller puts an engine to sleep rather than stopping it."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_CONTROLLER_SLEEP_", extra="ignore")

    budget_mb: int = Field(default=0, ge=0)
    """Host RAM in MiB that sleeping engines may hold together (their offloaded weights
    plus ``process_mb`` each). 0 (the default) turns sleep off: a sleeper keeps its process
    and, at level 1, a host copy of its weights, memory this machine's other users may need,
    so the operator sizes it (say a third of host RAM) rather than an upgrade taking it."""

    level: SleepLevel = 1
    """vLLM's sleep level: 1 offloads the weights to host RAM (a wake copies them back, the
    fast swap); 2 discards them (a wake reads them from disk again, but costs no host RAM)."""

    stop_after_s: float = Field(default=1800.0, gt=0)
    """The second timeout: a sleeper not woken within this many seconds is stopped. 30 min:
    six of the default 5 min idle timeouts, so a model used every few minutes wakes cheaply
    while one left for the day gives its host RAM back."""

    process_mb: int = Field(default=1024, ge=0)
    """Host RAM in MiB a sleeping engine's process costs besides its weights (Python, the
    CUDA context, the tokenizer): about 1 GiB for vLLM."""

    timeout_s: float = Field(default=120.0, gt=0)
    """How long a sleep or wake call may take (a sleep first finishes in-flight requests)
    before the engine is stopped instead."""

    def policy(self) -> SleepPolicy:
        """The keeper's slice of these settings."""
        return SleepPolicy(
            budget_mb=self.budget_mb,
            level=self.level,
            stop_after_s=self.stop_after_s,
            process_mb=self.process_mb,
            timeout_s=self.timeout_s,
        )
