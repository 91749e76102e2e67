"""Engine metrics over HTTP: the Prometheus text the engines serve."""

from flexinfer_controller.adapters.metrics.http import HttpEngineMetrics

__all__ = ["HttpEngineMetrics"]
