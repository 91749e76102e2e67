"""Registry logic, free of any web framework or gRPC.

Today it holds only what the health and ping RPCs answer (:mod:`.info`). The registry issue
brings the rest: model stores (memory, SQL, Redis, Kubernetes) and providers (file, Hugging
Face, S3, GCS, NGC) behind small interfaces, the download/stream/list/delete logic of
ModelExpress's ``ModelService``, and the P2P source metadata of ``P2pService``. The gRPC
servicers in :mod:`flexinfer_registry.grpc_server` stay thin translations onto this core.
"""
