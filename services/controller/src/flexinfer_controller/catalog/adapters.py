"""The default adapters: generic, harbor, ghcr and ecr, with their detection rules."""

from __future__ import annotations

from flexinfer_controller.catalog.adapter import AdapterFactory, AdapterRegistry
from flexinfer_controller.catalog.ecr import ECR_HOST_PATTERN, EcrAdapter
from flexinfer_controller.catalog.generic import DistributionAdapter
from flexinfer_controller.catalog.ghcr import GhcrAdapter
from flexinfer_controller.catalog.harbor import HarborAdapter, is_harbor


def default_adapters() -> AdapterRegistry:
    """Every built-in adapter; ghcr.io and ECR hosts by name, Harbor by probe."""
    factories: dict[str, AdapterFactory] = {
        "generic": DistributionAdapter,
        "harbor": HarborAdapter,
        "ghcr": GhcrAdapter,
        "ecr": EcrAdapter,
    }
    return AdapterRegistry(
        factories,
        host_rules=[(r"ghcr\.io", "ghcr"), (ECR_HOST_PATTERN, "ecr")],
        probes=[("harbor", is_harbor)],
        fallback="generic",
    )
