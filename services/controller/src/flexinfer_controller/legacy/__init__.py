"""The legacy v1alpha1 kinds (ModelCache...) reconciled on Kubernetes."""
