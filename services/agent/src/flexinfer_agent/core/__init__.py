"""Node logic of the agent, free of any web framework.

Nothing is here yet, on purpose: the agent today only answers health and metrics for its
node. The agent issue brings GPU discovery (parsing ``nvidia-smi`` and ``rocm-smi`` output,
declared inventories where there is no GPU), the ``flexinfer.ai/gpu.*`` node labels
(vendor, arch, vram, count, int4), heartbeats on the bus, and the node-local weight cache
with its flash loader.
"""
