"""Tensor discovery: every tensor of a module that a peer must send, once.

``named_parameters()``/``named_buffers()`` miss tensors that post-processing stashes as
bare module attributes or on plain Python objects (a quant method's scales, a workspace):
copying only the registered tensors then leaves those values computed from dummy weights,
and inference is silently wrong. ``adopt_hidden_tensors`` promotes them to non-persistent
buffers first, so the manifest includes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from flexinfer_transfer.errors import ManifestMismatchError

TensorFilter = Callable[[torch.Tensor], bool]
MAX_DEPTH = 4
"""How deep into plain objects the scan goes: quant configs nest one or two levels."""


def adopt_hidden_tensors(module: nn.Module, accept: TensorFilter | None = None) -> list[str]:
    """Register bare tensor attributes, and tensors on plain objects held by modules, as
    non-persistent buffers; returns their qualified names."""
    adopted: list[str] = []
    for prefix, owner in module.named_modules():
        for attr, value in list(vars(owner).items()):
            if attr in ("_parameters", "_buffers", "_modules"):
                continue
            for path, tensor in _hidden(value, attr, 0, set()):
                if isinstance(tensor, nn.Parameter) or (accept and not accept(tensor)):
                    continue
                name = path.replace(".", "__")
                if path == attr:  # a bare attribute: the buffer replaces it
                    delattr(owner, attr)
                if name not in owner._buffers:
                    owner.register_buffer(name, tensor, persistent=False)
                    adopted.append(f"{prefix}.{name}" if prefix else name)
    return adopted


def _hidden(value: object, path: str, depth: int, seen: set[int]) -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if depth >= MAX_DEPTH or isinstance(value, (nn.Module, str, bytes, int, float, type)):
        return []
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(value)]
    elif hasattr(value, "__dict__") and not callable(value):
        items = list(vars(value).items())
    else:
        return []
    found: list[tuple[str, torch.Tensor]] = []
    for key, item in items:
        found.extend(_hidden(item, f"{path}.{key}", depth + 1, seen))
    return found


@dataclass
class ManifestEntry:
    """One transfer region: a contiguous tensor, or a storage's flat bytes."""

    name: str
    tensor: torch.Tensor
    """What is registered and copied (a flat byte view for storage views)."""
    dtype: str
    storage_view: bool = False
    aliases: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Bytes in the region."""
        return self.tensor.numel() * self.tensor.element_size()


def discover_tensors(module: nn.Module, accept: TensorFilter | None = None) -> list[ManifestEntry]:
    """Parameters and buffers, non-contiguous ones as storage views, tied ones once."""
    by_region: dict[tuple[int, int], ManifestEntry] = {}
    named: list[tuple[str, torch.Tensor]] = [
        *module.named_parameters(remove_duplicate=False),
        *module.named_buffers(remove_duplicate=False),
    ]
    for name, tensor in named:
        if accept and not accept(tensor):
            continue
        region, is_view = _region(tensor)
        key = (region.data_ptr(), region.numel() * region.element_size())
        if key in by_region:
            by_region[key].aliases.append(name)
            continue
        by_region[key] = ManifestEntry(name, region, str(tensor.dtype), is_view)
    return sorted(by_region.values(), key=lambda e: e.name)


def _region(tensor: torch.Tensor) -> tuple[torch.Tensor, bool]:
    data = tensor.detach()
    if data.is_contiguous():
        return data, False
    storage = data.untyped_storage()
    flat = torch.empty(0, dtype=torch.uint8, device=data.device)
    return flat.set_(storage, 0, (storage.nbytes(),), (1,)), True


def check_manifest(source: list[tuple[str, int]], target: list[ManifestEntry]) -> None:
    """Raise ManifestMismatchError unless source and target list the same (name, size)."""
    want = {entry.name: entry.size for entry in target}
    have = dict(source)
    if want == have:
        return
    missing = sorted(set(want) - set(have))[:3]
    extra = sorted(set(have) - set(want))[:3]
    sized = sorted(k for k in set(want) & set(have) if want[k] != have[k])[:3]
    raise ManifestMismatchError(
        f"source and target manifests differ: missing {missing}, unexpected {extra}, "
        f"size differs {sized}"
    )
