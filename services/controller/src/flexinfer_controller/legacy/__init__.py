"""The legacy v1alpha1 kinds on Kubernetes: ModelDeployments bridged to Models, ModelCaches
reconciled into PVCs and download Jobs."""
