"""Reconcile step 3, detectGPU: which accelerator a Model runs on, and whether it fits.

The fleet is a list of ``NodeGPU``: from the agent's ``flexinfer.ai/gpu.*`` node labels on
Kubernetes, from the declared inventory in local mode (``FLEXINFER_CONTROLLER_GPUS``).
``detect`` resolves ``spec.gpu.vendor`` against it, as the seed's flowchart does:

- ``cpu`` needs no accelerator; an explicit vendor is taken as declared;
- ``auto`` takes the one GPU vendor the fleet has (of those the backend runs on), the CPU
  when it has none (for a backend that runs there), and is *ambiguous* with two: the
  Model waits, Schedulable false, and is looked at again in 30 s (the seed's requeue);

then the backend's vendors, architectures and the GPU count are checked against the nodes
of that vendor, and the ``Placer`` (``core.placement``: the scheduler's placement core)
picks a GPU among them, or says why none can take the Model. Where the runtime pins GPUs
(local mode), the GPUs its replicas already hold (``Hold``) count against the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
    indices: tuple[int, ...] | None = None
    """The GPUs' device indices on the node (None: ``0 .. count-1``)."""
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    """The node's ``flexinfer.ai/*`` labels (scoring and the benchmark key read them)."""
    annotations: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    """The node's annotations (utilisation, cost, KV-cache usage), where reported."""

    @property
    def devices(self) -> tuple[int, ...]:
        """The device index of each of the node's GPUs."""
        return self.indices if self.indices is not None else tuple(range(self.count))


@dataclass(frozen=True, slots=True)
class GPUAssignment:
    """The GPUs one replica runs on, pinned by the runtime (local mode)."""

    node: str
    vendor: str
    devices: tuple[int, ...]
    shared: str | None = None
    """The Model's ``gpu.shared`` group; None: it has the GPUs to itself."""
    reserved_mb: int | None = None
    """MiB taken on each GPU by a shared Model (its ``vramEstimateMB``); None: unknown."""
    arch: str | None = None
    vram_mb: int | None = None
    """Memory of one of the GPUs, in MiB."""

    @property
    def device(self) -> str:
        """The devices as status.gpu.device and the vendor's visibility variable say them."""
        return ",".join(str(d) for d in self.devices)


@dataclass(frozen=True, slots=True)
class Hold:
    """GPUs a live (or stopping) replica of ``model`` holds."""

    model: str
    generation: int
    assignment: GPUAssignment


@dataclass(frozen=True, slots=True)
class GPURequest:
    """What one replica of a Model asks of placement."""

    namespace: str
    name: str
    backend: str
    count: int
    vram_estimate_mb: int | None = None
    shared: str | None = None

    @property
    def key(self) -> str:
        """namespace/name."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Choice:
    """A Placer's answer: the node, and its GPUs when the runtime pins them."""

    node: NodeGPU
    devices: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the Model runs: the vendor, the chosen node's GPU when it has one, and the
    devices on it when the runtime pins them."""

    vendor: str
    node: NodeGPU | None = None
    devices: tuple[int, ...] | None = None


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
    """Picks the GPUs of one replica among the nodes of its vendor (``core.placement``)."""

    async def choose(
        self, request: GPURequest, nodes: Sequence[NodeGPU], holds: Sequence[Hold] | None
    ) -> Choice | Unplaced:
        """A node of ``nodes`` (never empty, each with ``request.count`` GPUs or more) and,
        when ``holds`` is not None (the runtime pins GPUs), its devices; or why none fits."""
        ...


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
    vram_mb = parse_vram_mb(vram) if vram else None
    return NodeGPU(node, vendor, count, arch, vram_mb, labels=dict(labels))


def declared_labels(
    vendor: str, count: int, arch: str | None, vram: str | None, prefix: str = LABEL_PREFIX
) -> dict[str, str]:
    """The labels the agent would set for declared GPUs (the vendor upper case, as the
    agent spells it): scoring and the benchmark key's device class read them."""
    labels = {f"{prefix}gpu.vendor": vendor.upper(), f"{prefix}gpu.count": str(count)}
    if arch:
        labels[f"{prefix}gpu.arch"] = arch
    if vram:
        labels[f"{prefix}gpu.vram"] = vram
    return labels


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


async def place(
    spec: GPUSpec,
    fleet: Sequence[NodeGPU] | None,
    backend: BackendGPUs,
    placer: Placer,
    request: GPURequest,
    holds: Sequence[Hold] | None = None,
) -> Placement | Unplaced:
    """detectGPU and the compatibility check: where the Model can run, or why not.

    With no fleet known (None) only an explicit vendor is checked against the backend, and
    ``auto`` stays ``auto``: the cluster's scheduler places the pods. ``holds`` are the GPUs
    the runtime's replicas hold (None: the runtime does not pin GPUs).
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
    choice = await placer.choose(request, fitting, holds)
    if isinstance(choice, Unplaced):
        return choice
    return Placement(vendor, choice.node, choice.devices)


def _unsupported(backend: BackendGPUs, vendor: str) -> Unplaced:
    supported = ", ".join(sorted(backend.vendors))
    message = f"backend {backend.name!r} does not run on {vendor} (supported: {supported})"
    return Unplaced("GPUVendorUnsupported", message, permanent=True)


def _fitting(
    spec: GPUSpec, vendor: str, nodes: Sequence[NodeGPU], backend: BackendGPUs
) -> list[NodeGPU] | Unplaced:
    """The nodes of ``vendor`` the Model can run on: architecture and GPU count (memory is
    the placement core's free-VRAM filter's to judge).

    A wrong architecture is permanent (the backend's kernels will not run there); too few
    GPUs waits, as nodes join or get labelled.
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
    return enough
