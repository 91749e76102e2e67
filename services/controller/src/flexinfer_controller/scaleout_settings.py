"""Scale-out by concurrency (``FLEXINFER_CONTROLLER_SCALEOUT_*``): docs/architecture.md,
"Scale-out". The per-Model target is ``spec.serverless.targetConcurrency``; these are the
windows every Model shares, with Knative's KPA defaults where it has one."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_controller.core.scaleout import ScaleOutPolicy


class ScaleOutSettings(BaseSettings):
    """How often the controller reads engines' load and how it averages it."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_CONTROLLER_SCALEOUT_", extra="ignore")

    tick_s: float = Field(default=2.0, gt=0)
    """Seconds between two reads of a serving Model's engines' metrics pages: a page is a
    few KiB, and 2 s gives the 6 s panic window three readings."""

    stable_window_s: float = Field(default=60.0, gt=0)
    """Seconds the in-flight count is averaged over (Knative's stable window): long
    enough that one long generation or a lull between clients moves nothing."""

    panic_window_s: float = Field(default=6.0, gt=0)
    """The short window of a burst (Knative: 10 % of the stable window)."""

    panic_threshold: float = Field(default=2.0, ge=1.0)
    """A burst that asks for this many times the ready replicas over the panic window
    scales up at once and holds every scale-down for a stable window (Knative: 200 %)."""

    scale_down_delay_s: float = Field(default=30.0, ge=0)
    """Seconds the load must ask for fewer replicas before one stops: scaling down is
    slower than scaling up, because a stopped replica costs a cold start (weights, CUDA
    graphs) to bring back, and a started one only its GPU's idle time."""

    def policy(self) -> ScaleOutPolicy:
        """The decision's slice of these settings."""
        return ScaleOutPolicy(
            tick_s=self.tick_s,
            stable_window_s=self.stable_window_s,
            panic_window_s=self.panic_window_s,
            panic_threshold=self.panic_threshold,
            scale_down_delay_s=self.scale_down_delay_s,
        )
