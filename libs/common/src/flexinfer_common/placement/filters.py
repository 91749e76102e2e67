"""The seed's three filters, each per node (the reference) and over node columns.

``reasons`` is the specification in plain Python, one node at a time; ``column_reasons``
gives the same verdicts and the same reason texts over ``NodeColumns`` rows, for the
scheduler's requests over a thousand nodes. The placement tests hold the two equal over
randomised and malformed node sets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flexinfer_common.placement.arch import ArchSupport
from flexinfer_common.placement.columns import Bools, NodeColumns, Rows
from flexinfer_common.placement.facts import NodeFacts, PodFacts

NO_VENDOR_LABEL = "No vendor label"
INSUFFICIENT_VRAM = "Insufficient VRAM"
UNSUPPORTED_ARCH = "Unsupported arch"

Rejections = tuple[Bools, list[str]]
"""Which of the rows a filter rejects, and the rejected rows' reasons in row order."""


def _none(rows: Rows) -> Rejections:
    return np.zeros(len(rows), dtype=np.bool_), []


class VendorLabelFilter:
    """Check 1: the node carries a ``flexinfer.ai/gpu.vendor`` label."""

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """``No vendor label`` for nodes without one."""
        return [None if node.vendor else NO_VENDOR_LABEL for node in nodes]

    def column_reasons(self, pod: PodFacts, table: NodeColumns, rows: Rows) -> Rejections:
        """``reasons`` over columns."""
        rejected = ~table.has_vendor[rows]
        return rejected, [NO_VENDOR_LABEL] * int(np.count_nonzero(rejected))


class FreeVRAMFilter:
    """Check 2: free VRAM >= the pod's estimate x its GPUs, when both are known."""

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """``Insufficient VRAM: ...`` for nodes with too little free memory."""
        estimate = pod.vram_estimate_mb
        if estimate is None:
            return [None] * len(nodes)
        # A pod that names an estimate but no GPU resource still needs one GPU's worth.
        gpus = max(pod.gpu_count, 1)
        needed = estimate * gpus
        return [
            None
            if node.free_mb is None or node.free_mb >= needed
            else f"{INSUFFICIENT_VRAM}: {node.free_mb:g} MB free, {needed:g} MB needed "
            f"({estimate:g} MB x {gpus} GPU{'s' if gpus > 1 else ''})"
            for node in nodes
        ]

    def column_reasons(self, pod: PodFacts, table: NodeColumns, rows: Rows) -> Rejections:
        """``reasons`` over columns: the reason is the same text around each node's free MB."""
        estimate = pod.vram_estimate_mb
        if estimate is None:
            return _none(rows)
        gpus = max(pod.gpu_count, 1)
        needed = estimate * gpus
        # Not (free >= needed) rather than free < needed: a NaN fails, as in ``reasons``.
        rejected = table.free_known[rows] & ~(table.free_mb[rows] >= needed)
        head = f"{INSUFFICIENT_VRAM}: "
        plural = "s" if gpus > 1 else ""
        tail = f" MB free, {needed:g} MB needed ({estimate:g} MB x {gpus} GPU{plural})"
        return rejected, [head + text + tail for text in table.free_text[rows[rejected]].tolist()]


class ArchFilter:
    """Check 3: the pod's backend runs on the node's GPU architecture, when both are known."""

    def __init__(self, arch: ArchSupport) -> None:
        self._arch = arch

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """``Unsupported arch: ...`` for nodes whose architecture the backend lacks."""
        backend = pod.backend
        if backend is None:
            return [None] * len(nodes)
        # A fleet has few distinct (vendor, arch) pairs: decide each once per call.
        verdicts: dict[tuple[str | None, str | None], str | None] = {}
        out: list[str | None] = []
        for node in nodes:
            pair = (node.vendor, node.arch)
            if pair not in verdicts:
                verdicts[pair] = self._verdict(backend, *pair)
            out.append(verdicts[pair])
        return out

    def column_reasons(self, pod: PodFacts, table: NodeColumns, rows: Rows) -> Rejections:
        """``reasons`` over columns: one verdict per (vendor, arch) id among the rows."""
        backend = pod.backend
        if backend is None:
            return _none(rows)
        pairs = table.pair[rows]
        verdicts: list[str | None] = [None] * len(table.pairs)
        for pair in np.flatnonzero(np.bincount(pairs, minlength=len(verdicts))).tolist():
            verdicts[pair] = self._verdict(backend, *table.pairs[pair])
        bad = np.fromiter((v is not None for v in verdicts), np.bool_, len(verdicts))
        rejected = bad[pairs]
        return rejected, [verdicts[pair] or "" for pair in pairs[rejected].tolist()]

    def _verdict(self, backend: str, vendor: str | None, arch: str | None) -> str | None:
        if vendor is None or arch is None or self._arch.supports(backend, vendor, arch):
            return None
        return f"{UNSUPPORTED_ARCH}: backend {backend} does not run on {vendor} {arch}"
