"""The v1alpha1 GPUGroup kind: its status from the arbiter's state, and the loop writing it."""
