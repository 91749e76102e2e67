"""The model cache through the registry's ModelExpress gRPC API (local mode's ensureCache).

``settings`` is importable without gRPC; ``create_model_cache`` (in ``.factory``) builds
the cache the settings ask for.
"""
