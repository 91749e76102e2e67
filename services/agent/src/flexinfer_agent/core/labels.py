"""The node's labels and annotations from an inventory, and the patch that writes only ours.

Labels (``P`` is the prefix, ``flexinfer.ai/`` by default):

- ``P gpu.vendor`` ``NVIDIA``/``AMD``/``INTEL``/``APPLE``; ``P gpu.arch`` ``sm_90``/``gfx942``;
  ``P gpu.vram`` one GPU's memory, in whole GiB (``80Gi``); ``P gpu.count``; ``P gpu.int4``;
  ``P gpu.device-class`` (the TPS key's deviceClass); ``P gpu-present`` ``true``/``false``.
- Annotation ``P gpu-free-memory``: MiB free over the labelled GPUs, refreshed each heartbeat
  (absent when no source says how much is free).
- Annotation ``P agent-keys``: which labels and annotations the agent set, so that the next
  agent (after a restart, or a GPU gone) removes exactly those it no longer wants.

A node has one vendor's labels: when two vendors show up (an iGPU beside a discrete card),
the one with the most memory is labelled. Mixed models of one vendor are labelled by the
most common model, with the smallest GPU's memory, so a placement never assumes more.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from flexinfer_agent.core.gpu import GPU

LABELS = (
    "gpu.vendor",
    "gpu.arch",
    "gpu.vram",
    "gpu.count",
    "gpu.int4",
    "gpu.device-class",
    "gpu-present",
)
"""Every label the agent may set, without the prefix."""
FREE_MEMORY = "gpu-free-memory"
AGENT_KEYS = "agent-keys"
ANNOTATIONS = (FREE_MEMORY, AGENT_KEYS)
"""Every annotation the agent may set, without the prefix."""


@dataclass(frozen=True, slots=True)
class NodeKeys:
    """What the agent wants on its Node."""

    labels: dict[str, str]
    annotations: dict[str, str]


def vram_quantity(mib: int) -> str:
    """``24564`` → ``24Gi`` (to the nearest GiB, as the agent's labels always read)."""
    return f"{(mib + 512) // 1024}Gi" if mib >= 1024 else f"{mib}Mi"


def labelled_gpus(gpus: list[GPU]) -> list[GPU]:
    """The GPUs the labels describe: those of the vendor with the most memory."""
    if not gpus:
        return []
    memory: Counter[str] = Counter()
    for gpu in gpus:
        memory[gpu.vendor] += gpu.memory_total_mib or 0
    vendor = max(memory, key=lambda v: (memory[v], sum(g.vendor == v for g in gpus)))
    return [gpu for gpu in gpus if gpu.vendor == vendor]


def _gpu_labels(gpus: list[GPU]) -> dict[str, str]:
    classes = Counter(gpu.device_class for gpu in gpus)
    primary = next(gpu for gpu in gpus if gpu.device_class == classes.most_common(1)[0][0])
    labels = {
        "gpu.vendor": primary.vendor.value,
        "gpu.count": str(len(gpus)),
        "gpu.int4": str(primary.int4).lower(),
        "gpu.device-class": primary.device_class,
        "gpu-present": "true",
    }
    if primary.arch:
        labels["gpu.arch"] = primary.arch
    sizes = [gpu.memory_total_mib for gpu in gpus if gpu.memory_total_mib is not None]
    if sizes:
        labels["gpu.vram"] = vram_quantity(min(sizes))
    return labels


def node_keys(gpus: list[GPU], prefix: str) -> NodeKeys:
    """The labels and annotations describing ``gpus`` (the agent-keys record included)."""
    chosen = labelled_gpus(gpus)
    labels = _gpu_labels(chosen) if chosen else {"gpu-present": "false"}
    annotations = {}
    free = [gpu.memory_free_mib for gpu in chosen if gpu.memory_free_mib is not None]
    if free:
        annotations[FREE_MEMORY] = str(sum(free))
    labels = {prefix + key: value for key, value in labels.items()}
    annotations = {prefix + key: value for key, value in annotations.items()}
    record = {"labels": sorted(labels), "annotations": sorted(annotations)}
    annotations[prefix + AGENT_KEYS] = json.dumps(record, separators=(",", ":"))
    return NodeKeys(labels, annotations)


def _recorded(annotations: dict[str, str], prefix: str) -> tuple[set[str], set[str]]:
    try:
        record = json.loads(annotations.get(prefix + AGENT_KEYS, "{}"))
        return set(record.get("labels", [])), set(record.get("annotations", []))
    except (ValueError, AttributeError, TypeError):
        return set(), set()  # hand-edited into nonsense: fall back to the catalogue


def _section(current: dict[str, str], wanted: dict[str, str], owned: set[str]) -> dict[str, Any]:
    changes: dict[str, Any] = {k: v for k, v in wanted.items() if current.get(k) != v}
    changes.update({k: None for k in owned - wanted.keys() if k in current})
    return changes


def merge_patch(metadata: dict[str, Any], wanted: NodeKeys, prefix: str) -> dict[str, Any] | None:
    """The JSON merge patch taking a Node's ``metadata`` to ``wanted``; None: nothing to do.

    Only the agent's keys are in it: those it wants, and those it owns but no longer wants
    (recorded in ``agent-keys``, plus the catalogue under the current prefix) as ``null``.
    """
    labels = dict(metadata.get("labels") or {})
    annotations = dict(metadata.get("annotations") or {})
    old_labels, old_annotations = _recorded(annotations, prefix)
    patch: dict[str, Any] = {}
    label_changes = _section(labels, wanted.labels, old_labels | {prefix + k for k in LABELS})
    owned_annotations = old_annotations | {prefix + k for k in ANNOTATIONS}
    annotation_changes = _section(annotations, wanted.annotations, owned_annotations)
    if label_changes:
        patch["labels"] = label_changes
    if annotation_changes:
        patch["annotations"] = annotation_changes
    return {"metadata": patch} if patch else None
