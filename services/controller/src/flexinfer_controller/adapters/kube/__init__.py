"""The controller on the Kubernetes API: the Model store, the informer, finalizers."""
