"""The legacy v1alpha1 kinds, served on Kubernetes by bridging them to v1alpha2 objects."""
