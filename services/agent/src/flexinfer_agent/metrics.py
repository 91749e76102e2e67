"""The agent's Prometheus metrics: what each heartbeat found, and what failed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from flexinfer_agent.core.heartbeat import NodeSnapshot

MIB = 1024 * 1024


class AgentMetrics:
    """GPU gauges per device, discovery and report error counters (a HeartbeatObserver)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.gpus = Gauge(
            "flexinfer_agent_gpus", "GPUs (or MIG instances) discovered on this node",
            registry=registry,
        )  # fmt: skip
        per_gpu = ["gpu", "vendor", "device_class"]
        self.memory_total = Gauge(
            "flexinfer_agent_gpu_memory_total_bytes", "Memory of each GPU", per_gpu,
            registry=registry,
        )  # fmt: skip
        self.memory_free = Gauge(
            "flexinfer_agent_gpu_memory_free_bytes",
            "Free memory of each GPU, where the discovery source reports it", per_gpu,
            registry=registry,
        )  # fmt: skip
        self.discovery_errors = Counter(
            "flexinfer_agent_discovery_errors",
            "Discovery sources that could not answer, by source and reason "
            "(missing, failed, timeout, bad-output)",
            ["source", "reason"], registry=registry,
        )  # fmt: skip
        self.heartbeats = Counter("flexinfer_agent_heartbeats", "Heartbeats run", registry=registry)
        self.report_errors = Counter(
            "flexinfer_agent_report_errors",
            "Heartbeats the apiserver or the bus did not take", registry=registry,
        )  # fmt: skip
        self.last_heartbeat = Gauge(
            "flexinfer_agent_last_heartbeat_timestamp_seconds",
            "When the last heartbeat ran (Unix time)", registry=registry,
        )  # fmt: skip

    def observed(self, snapshot: NodeSnapshot) -> None:
        """Set the gauges to ``snapshot`` (GPUs gone disappear) and count its errors."""
        gpus = snapshot.inventory.gpus
        self.gpus.set(len(gpus))
        self.memory_total.clear()
        self.memory_free.clear()
        for gpu in gpus:
            labels = (gpu.uuid or str(gpu.index), gpu.vendor.value, gpu.device_class)
            if gpu.memory_total_mib is not None:
                self.memory_total.labels(*labels).set(gpu.memory_total_mib * MIB)
            if gpu.memory_free_mib is not None:
                self.memory_free.labels(*labels).set(gpu.memory_free_mib * MIB)
        for error in snapshot.inventory.errors:
            self.discovery_errors.labels(error.source, error.reason).inc()
        self.heartbeats.inc()
        self.last_heartbeat.set(snapshot.at.timestamp())

    def report_failed(self) -> None:
        """Count a heartbeat that was not delivered."""
        self.report_errors.inc()
