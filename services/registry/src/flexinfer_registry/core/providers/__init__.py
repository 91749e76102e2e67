"""Model providers: where the registry downloads models from (file, HF, S3, GCS, NGC).

:mod:`.base` holds the small :class:`~.base.ModelProvider` interface and its result types;
:mod:`.registry` picks a provider by URL scheme or by the proto's ``ModelProvider`` enum.
Each implementation lives in its own sibling module and is imported only when first used, so
the registry starts without boto3 or huggingface_hub loaded.
"""
