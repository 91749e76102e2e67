"""What the registry ships for its clients: ``flexinfer mx`` and its ModelExpress client,
with StreamModelFiles received over an HTTP/2 connection of its own (:mod:`.grpc_stream`)."""
