"""The scheduler's edges: the only modules that import a Kubernetes client."""
