"""Which reporter a setting names (``FLEXINFER_AGENT_REPORT``), opened and closed with the app."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from flexinfer_agent.core.heartbeat import NoReporter, Reporter
from flexinfer_agent.settings import AgentSettings
from flexinfer_common.bus import open_bus

ReporterFactory = Callable[[AgentSettings], AbstractAsyncContextManager[Reporter]]


@asynccontextmanager
async def _kubernetes(settings: AgentSettings) -> AsyncIterator[Reporter]:
    from flexinfer_agent.adapters.kube import NodeClient, NodeLabeler

    client = NodeClient(settings.kube)
    try:
        yield NodeLabeler(client, settings.labels.prefix)
    finally:
        await client.close()


@asynccontextmanager
async def _bus(settings: AgentSettings) -> AsyncIterator[Reporter]:
    from flexinfer_agent.adapters.bus import BusReporter

    bus = await open_bus(settings.bus)
    try:
        yield BusReporter(bus, settings.heartbeat.interval_s)
    finally:
        await bus.close()


@asynccontextmanager
async def _none(settings: AgentSettings) -> AsyncIterator[Reporter]:
    yield NoReporter()


def reporters() -> dict[str, ReporterFactory]:
    """Report mode → factory."""
    return {"kubernetes": _kubernetes, "bus": _bus, "none": _none}


def report_mode(settings: AgentSettings) -> str:
    """The mode ``auto`` means here: ``kubernetes`` in a cluster (or given an apiserver)."""
    if settings.report != "auto":
        return settings.report
    in_cluster = settings.kube.host is not None or "KUBERNETES_SERVICE_HOST" in os.environ
    return "kubernetes" if in_cluster else "bus"


def open_reporter(settings: AgentSettings) -> AbstractAsyncContextManager[Reporter]:
    """The reporter the settings name, as an async context manager."""
    return reporters()[report_mode(settings)](settings)
