"""Placement logic of the scheduler, free of any web framework.

Nothing is here yet, on purpose: the service today only answers health and metrics. The
scheduler issue brings the placement core: node and GPU inventories, a registry of filters
(vendor label present, free VRAM covers ``gpu.vramEstimateMB``, backend supports the GPU
architecture) and scorers (tokens/s, utilisation, cost, KV-cache pressure, free VRAM, tenant
fair share), combined as in the operator's extender. The same core serves Kubernetes'
``/filter`` and ``/prioritize`` calls and the local runtime's placement decisions.
"""
