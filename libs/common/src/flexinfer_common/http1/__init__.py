"""FlexInfer's own HTTP/1.1 server protocol, for the services whose hot requests it serves.

An asyncio protocol (``server.HttpProtocol``) that plugs into uvicorn as its ``http`` class:
uvicorn keeps the socket, lifespan, signals and graceful shutdown, and each request costs
one ``exchange.Exchange`` and one task. An app that carries a ``pipeline``
(``downstream.Pipeline``: ``handles(method, target)`` and ``serve(downstream)``) has the
requests it handles served without ASGI; everything else goes to the ASGI app.

Written for the proxy, where uvicorn's per-request objects were a quarter of its CPU, and
held to h11 by the differential suites in tests/security (bench/RESULTS.md). The scheduler
serves kube-scheduler's extender verbs on it too: there the HTTP layer was most of what a
request cost beyond the placement itself.
"""
