"""Node logic of the agent, free of any web framework.

``sources/`` parse each vendor tool's output into ``gpu.GPU``; ``discovery`` tries them in
order; ``labels`` turns GPUs into the ``flexinfer.ai/gpu.*`` node keys and the merge patch
that writes only those; ``heartbeat`` runs it all every interval and hands the result to a
reporter (the Node, the bus). The node-local weight cache is not here yet.
"""
