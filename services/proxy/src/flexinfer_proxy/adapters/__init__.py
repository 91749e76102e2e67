"""The proxy's adapters to outside systems (the Kubernetes apiserver)."""
