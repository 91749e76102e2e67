"""FlexInfer weight loading: tensor manifests and the loader strategy chain."""

from flexinfer_transfer.chain import LoaderChain, LoadReport
from flexinfer_transfer.loader import NotApplicableError, WeightLoader
from flexinfer_transfer.registry import LoaderFactory, create_loader_chain, default_loaders
from flexinfer_transfer.safetensors_loader import SafetensorsLoader

__all__ = [
    "LoadReport",
    "LoaderChain",
    "LoaderFactory",
    "NotApplicableError",
    "SafetensorsLoader",
    "WeightLoader",
    "create_loader_chain",
    "default_loaders",
]
