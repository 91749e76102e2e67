"""Controller logic that imports no web framework: queue, reconciler, scaling, documents."""
