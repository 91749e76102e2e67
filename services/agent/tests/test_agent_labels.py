"""Node labels and annotations from an inventory, and the merge patch of only our keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flexinfer_agent.core.gpu import GPU, Vendor, device_class, nvidia_arch
from flexinfer_agent.core.labels import merge_patch, node_keys, vram_quantity
from flexinfer_agent.core.sources import nvidia_smi, rocm_smi

FIXTURES = Path(__file__).parent / "fixtures"
P = "flexinfer.ai/"


def _nvidia(name: str) -> list[GPU]:
    return [gpu for gpu, _ in nvidia_smi.parse_query((FIXTURES / "nvidia-smi" / name).read_text())]


def test_an_eight_h100_node() -> None:
    keys = node_keys(_nvidia("8x-h100.csv"), P)
    assert keys.labels == {
        P + "gpu.vendor": "NVIDIA",
        P + "gpu.arch": "sm_90",
        P + "gpu.vram": "80Gi",
        P + "gpu.count": "8",
        P + "gpu.int4": "true",
        P + "gpu.device-class": "nvidia-h100-80gb-hbm3",
        P + "gpu-present": "true",
    }
    assert keys.annotations[P + "gpu-free-memory"] == str(81004 * 5 + 40268 * 2 + 6130)
    record = json.loads(keys.annotations[P + "agent-keys"])
    assert record == {
        "labels": sorted(keys.labels),
        "annotations": [P + "gpu-free-memory"],
    }


def test_an_mi300x_node_with_a_custom_prefix() -> None:
    gpus = rocm_smi.parse((FIXTURES / "rocm-smi" / "8x-mi300x.json").read_text())
    labels = node_keys(gpus, "example.com/").labels
    assert labels["example.com/gpu.vendor"] == "AMD"
    assert labels["example.com/gpu.arch"] == "gfx942"
    assert labels["example.com/gpu.vram"] == "192Gi"


def test_a_node_without_gpus_says_so() -> None:
    keys = node_keys([], P)
    assert keys.labels == {P + "gpu-present": "false"}
    assert set(keys.annotations) == {P + "agent-keys"}


def test_the_vendor_with_most_memory_is_labelled_and_mixed_models_conservatively() -> None:
    igpu = GPU(Vendor.INTEL, "Intel(R) UHD Graphics 770", 0, "drm", memory_total_mib=512)
    big = GPU(Vendor.NVIDIA, "NVIDIA L40S", 0, "x", memory_total_mib=46068, arch="sm_89")
    small = GPU(Vendor.NVIDIA, "NVIDIA L4", 1, "x", memory_total_mib=23034, arch="sm_89")
    again = GPU(Vendor.NVIDIA, "NVIDIA L4", 2, "x", memory_total_mib=23034, arch="sm_89")
    labels = node_keys([igpu, big, small, again], P).labels
    assert labels[P + "gpu.vendor"] == "NVIDIA"
    assert labels[P + "gpu.count"] == "3"
    assert labels[P + "gpu.device-class"] == "nvidia-l4"
    assert labels[P + "gpu.vram"] == "22Gi"


@pytest.mark.parametrize(
    ("mib", "quantity"), [(24564, "24Gi"), (81559, "80Gi"), (23034, "22Gi"), (512, "512Mi")]
)
def test_vram_quantity(mib: int, quantity: str) -> None:
    assert vram_quantity(mib) == quantity


def test_device_classes_are_label_values() -> None:
    long = "NVIDIA " + "Very Long Name " * 8
    value = device_class(Vendor.NVIDIA, long, "7g.80gb")
    assert len(value) <= 63
    assert value[-1].isalnum()
    assert device_class(Vendor.AMD, "Instinct MI210") == "amd-instinct-mi210"
    assert device_class(Vendor.INTEL, "Intel(R) Arc(TM) A770 Graphics") == "intel-arc-a770-graphics"


def test_int4_by_architecture() -> None:
    def gpu(vendor: Vendor, arch: str | None) -> GPU:
        return GPU(vendor, "x", 0, "t", arch=arch)

    assert [gpu(Vendor.NVIDIA, a).int4 for a in ("sm_70", "sm_75", "sm_90", None)] == [
        False, True, True, False,
    ]  # fmt: skip
    assert [gpu(Vendor.AMD, a).int4 for a in ("gfx906", "gfx90a", "gfx1100", "gfx942")] == [
        False, True, True, True,
    ]  # fmt: skip
    assert gpu(Vendor.INTEL, "pvc").int4
    assert not gpu(Vendor.INTEL, None).int4
    assert nvidia_arch("10.0") == "sm_100"
    with pytest.raises(ValueError, match="not a compute capability"):
        nvidia_arch("[N/A]")


def _node(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, object]:
    return {"labels": labels, "annotations": annotations or {}}


def test_the_patch_sets_ours_and_never_touches_other_keys() -> None:
    wanted = node_keys(_nvidia("l4.csv"), P)
    other = {"kubernetes.io/hostname": "n1", "nvidia.com/gpu.present": "true", P + "zone": "a"}
    patch = merge_patch(_node(other), wanted, P)
    assert patch is not None
    assert patch["metadata"]["labels"] == wanted.labels
    assert patch["metadata"]["annotations"] == wanted.annotations


def test_nothing_changed_is_no_patch() -> None:
    wanted = node_keys(_nvidia("l4.csv"), P)
    assert merge_patch(_node(wanted.labels, wanted.annotations), wanted, P) is None


def test_gpus_gone_remove_the_keys_set_before() -> None:
    before = node_keys(_nvidia("l4.csv"), P)
    after = node_keys([], P)
    current = _node({**before.labels, "team": "a"}, {**before.annotations, "note": "x"})
    patch = merge_patch(current, after, P)
    assert patch is not None
    labels, annotations = patch["metadata"]["labels"], patch["metadata"]["annotations"]
    assert labels[P + "gpu-present"] == "false"
    assert labels[P + "gpu.vendor"] is None
    assert labels[P + "gpu.arch"] is None
    assert "team" not in labels
    assert "note" not in annotations
    assert annotations[P + "gpu-free-memory"] is None


def test_a_recorded_key_outside_the_catalogue_is_removed_too() -> None:
    record = json.dumps({"labels": [P + "gpu.retired-key"], "annotations": []})
    current = _node({P + "gpu.retired-key": "x"}, {P + "agent-keys": record})
    patch = merge_patch(current, node_keys([], P), P)
    assert patch is not None
    assert patch["metadata"]["labels"][P + "gpu.retired-key"] is None


def test_a_mangled_record_falls_back_to_the_catalogue() -> None:
    current = _node({P + "gpu.count": "2"}, {P + "agent-keys": "[not json"})
    patch = merge_patch(current, node_keys([], P), P)
    assert patch is not None
    assert patch["metadata"]["labels"][P + "gpu.count"] is None
