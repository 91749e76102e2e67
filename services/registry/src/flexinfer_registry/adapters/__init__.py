"""Edges to foreign systems (Kubernetes API): the only modules that import their clients."""
