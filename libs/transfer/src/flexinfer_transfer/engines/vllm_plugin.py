"""The ``vllm.general_plugins`` entry point: vLLM calls ``register`` in each of its
processes before loading a model. Importing this module, or calling ``register`` where
vLLM is not installed (a tool merely scanning entry points), imports no vLLM and fails
nothing."""

from __future__ import annotations

import logging

from flexinfer_transfer.optional_packages import missing_package

log = logging.getLogger(__name__)


def register() -> bool:
    """Register ``--load-format flexinfer`` with vLLM; False (logged) without vLLM."""
    missing = missing_package("vllm")
    if missing is not None:
        log.info("flexinfer's vLLM loader not registered: %s", missing)
        return False
    from flexinfer_transfer.engines import vllm_loader

    vllm_loader.register()
    return True
