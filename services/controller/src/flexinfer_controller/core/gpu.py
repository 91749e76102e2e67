"""Reconcile step 3, detectGPU: which accelerator a Model runs on, and whether it fits.

The fleet is a list of ``NodeGPU``: from the agent's ``flexinfer.ai/gpu.*`` node labels on
Kubernetes, from the declared inventory in local mode (``FLEXINFER_CONTROLLER_GPUS``).
``detect`` resolves ``spec.gpu.vendor`` against it, as the seed's flowchart does:

- ``cpu`` needs no accelerator; an explicit vendor is taken as declared;
- ``auto`` takes the one GPU vendor the fleet has (of those the backend runs on), the CPU
  when it has none (for a backend that runs there), and is *ambiguous* with two: the
  Model waits, Schedulable false, and is looked at again in 30 s (the seed's requeue);

then ``compatible`` checks the backend's vendors and architectures and the VRAM estimate
against the nodes of that vendor. Which node among the fitting ones is the ``Placer``'s
choice: the seam the scheduler's placement core plugs into.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from flexinfer_common.api import GPUSpec
from flexinfer_common.api.model import GPUVendor
from flexinfer_common.quantity import quantity_mb

LABEL_PREFIX = "flexinfer.ai/"
"""The agent's default ``--label-prefix``."""
CPU = "cpu"
RECHECK_S = 30.0
"""The seed's requeue for a Model that cannot be placed yet: nodes get labelled, join."""


@dataclass(frozen=True, slots=True)
class NodeGPU:
    """One node's accelerators, as its labels (or the declared inventory) describe them."""

    node: str
    vendor: str
    """Lower case: ``nvidia``, ``amd``, ``intel``."""
    count: int = 1
    arch: str | None = None
    vram_mb: int | None = None
    """Memory of one GPU in MiB; None when not labelled."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the Model runs: the vendor, and the chosen node's GPU when it has one."""

    vendor: str
    node: NodeGPU | None = None


@dataclass(frozen=True, slots=True)
class Unplaced:
    """Why the Model cannot be placed; ``permanent``: only a spec change helps."""

    reason: str
    message: str
    permanent: bool


class GPUInventory(Protocol):
    """The fleet's accelerators now (kept current by whoever watches the nodes)."""

    def nodes(self) -> list[NodeGPU] | None:
        """Every node with a GPU (nodes without one are not listed); None when the fleet
        is not known here, and placement is left to the cluster's scheduler."""


class UnknownInventory:
    """A fleet this controller does not see: only the backend's vendors are checked."""

    def nodes(self) -> list[NodeGPU] | None:
        """None."""
        return None


class DeclaredInventory:
    """A fixed fleet: local mode's declared GPUs (none: the machine has only its CPU)."""

    def __init__(self, nodes: Sequence[NodeGPU]) -> None:
        self._nodes = list(nodes)

    def nodes(self) -> list[NodeGPU] | None:
        """The declared nodes."""
        return list(self._nodes)


class Placer(Protocol):
    """Picks one node among those that fit (the scheduler's placement core goes here)."""

    def pick(self, spec: GPUSpec, fitting: Sequence[NodeGPU]) -> NodeGPU:
        """One of ``fitting`` (never empty)."""


class MostVRAMPlacer:
    """The node whose GPUs have the most memory, then the most GPUs, then by name."""

    def pick(self, spec: GPUSpec, fitting: Sequence[NodeGPU]) -> NodeGPU:
        """The roomiest node."""
        return min(fitting, key=lambda n: (-(n.vram_mb or 0), -n.count, n.node))


class BackendGPUs(Protocol):
    """What a backend says about accelerators (``backends.Backend`` satisfies it)."""

    @property
    def name(self) -> str:
        """The backend's canonical name."""

    @property
    def vendors(self) -> frozenset[str]:
        """The vendors it runs on (``cpu`` included when it runs without a GPU)."""

    def supports_arch(self, vendor: str, arch: str) -> bool:
        """Whether the backend's kernels run on ``arch`` of ``vendor``."""


def parse_vram_mb(value: str) -> int | None:
    """A Kubernetes quantity (``24Gi``, ``80G``) in MiB; None when it is not one."""
    mib = quantity_mb(value)
    return None if mib is None else int(mib)


def node_gpu(node: str, labels: Mapping[str, str], prefix: str = LABEL_PREFIX) -> NodeGPU | None:
    """The node's GPUs from the agent's labels; None for a node without a vendor label."""
    vendor = labels.get(f"{prefix}gpu.vendor", "").strip().lower()
    if not vendor or vendor == CPU:
        return None
    count_label = labels.get(f"{prefix}gpu.count", "1").strip()
    count = int(count_label) if count_label.isdigit() and int(count_label) > 0 else 1
    vram = labels.get(f"{prefix}gpu.vram")
    arch = labels.get(f"{prefix}gpu.arch", "").strip().lower() or None
    return NodeGPU(node, vendor, count, arch, parse_vram_mb(vram) if vram else None)


def detect_vendor(spec: GPUSpec, fleet: Sequence[NodeGPU], backend: BackendGPUs) -> str | Unplaced:
    """The vendor ``spec.gpu.vendor`` means on this fleet, or why it cannot be told."""
    if spec.vendor is not GPUVendor.AUTO:
        return spec.vendor.value
    # Only vendors the backend runs on count: a fleet of NVIDIA and Intel nodes is not
    # ambiguous for a backend that has no Intel build.
    vendors = sorted({n.vendor for n in fleet} & backend.vendors)
    if len(vendors) > 1:
        return Unplaced(
            "AmbiguousGPUVendor",
            f"gpu.vendor is auto and the nodes have {' and '.join(vendors)} GPUs that "
            f"backend {backend.name!r} runs on; set spec.gpu.vendor",
            permanent=False,
        )
    if vendors:
        return vendors[0]
    if CPU in backend.vendors:
        return CPU
    return Unplaced(
        "NoGPUNodes",
        f"backend {backend.name!r} needs a GPU and no node has one "
        f"(supported: {', '.join(sorted(backend.vendors))})",
        permanent=False,
    )


def place(
    spec: GPUSpec, fleet: Sequence[NodeGPU] | None, backend: BackendGPUs, placer: Placer
) -> Placement | Unplaced:
    """detectGPU and the compatibility check: where the Model can run, or why not.

    With no fleet known (None) only an explicit vendor is checked against the backend, and
    ``auto`` stays ``auto``: the cluster's scheduler places the pods.
    """
    if fleet is None:
        declared = spec.vendor.value
        if declared != GPUVendor.AUTO.value and declared not in backend.vendors:
            return _unsupported(backend, declared)
        return Placement(declared)
    vendor = detect_vendor(spec, fleet, backend)
    if isinstance(vendor, Unplaced):
        return vendor
    if vendor not in backend.vendors:
        return _unsupported(backend, vendor)
    if vendor == CPU:
        return Placement(CPU)
    fitting = _fitting(spec, vendor, [n for n in fleet if n.vendor == vendor], backend)
    if isinstance(fitting, Unplaced):
        return fitting
    return Placement(vendor, placer.pick(spec, fitting))


def _unsupported(backend: BackendGPUs, vendor: str) -> Unplaced:
    supported = ", ".join(sorted(backend.vendors))
    message = f"backend {backend.name!r} does not run on {vendor} (supported: {supported})"
    return Unplaced("GPUVendorUnsupported", message, permanent=True)


def _fitting(
    spec: GPUSpec, vendor: str, nodes: Sequence[NodeGPU], backend: BackendGPUs
) -> list[NodeGPU] | Unplaced:
    """The nodes of ``vendor`` the Model fits on: architecture, GPU count, VRAM.

    A wrong architecture is permanent (the backend's kernels will not run there); too few
    GPUs or too little memory waits, as nodes join or get labelled.
    """
    if not nodes:
        message = f"gpu.vendor is {vendor} and no node has a {vendor} GPU"
        return Unplaced("NoMatchingGPU", message, permanent=False)
    archs = [n for n in nodes if n.arch is None or backend.supports_arch(n.vendor, n.arch)]
    if not archs:
        seen = ", ".join(sorted({n.arch or "" for n in nodes}))
        message = f"backend {backend.name!r} does not support the GPU architecture(s) {seen}"
        return Unplaced("GPUArchUnsupported", message, permanent=True)
    enough = [n for n in archs if n.count >= spec.effective_count]
    if not enough:
        most = max(n.count for n in archs)
        message = f"gpu.count is {spec.effective_count}; no node has more than {most}"
        return Unplaced("InsufficientGPUs", message, permanent=False)
    need = spec.vram_estimate_mb
    roomy = [n for n in enough if need is None or n.vram_mb is None or n.vram_mb >= need]
    if not roomy:
        most = max(n.vram_mb or 0 for n in enough)
        message = f"vramEstimateMB {need} exceeds every node's GPU memory (at most {most} MiB)"
        return Unplaced("InsufficientVRAM", message, permanent=False)
    return roomy
