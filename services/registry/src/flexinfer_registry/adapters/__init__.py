"""Edges to foreign systems: model providers (:mod:`.providers`), record stores
(:mod:`.stores`) and the Kubernetes API. The only modules that import their clients."""
