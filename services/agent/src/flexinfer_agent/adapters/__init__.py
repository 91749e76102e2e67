"""The agent's edges: the apiserver (its own Node) and the event bus."""
