"""Node and pod facts: labels and annotations parsed once; malformed values absent, reported."""

from __future__ import annotations

import dataclasses

import pytest

from flexinfer_common.placement import keys
from flexinfer_common.placement.facts import (
    canonical_backend,
    device_class,
    node_facts,
    pod_facts,
    requested_gpus,
)


class Sink:
    """Collects malformed reports."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []

    def report(self, key: str, value: str) -> None:
        self.reports.append((key, value))


def test_a_fully_labelled_node() -> None:
    sink = Sink()
    labels = {
        keys.GPU_VENDOR: "NVIDIA",
        keys.GPU_ARCH: "SM_89",
        keys.GPU_VRAM: "24Gi",
        keys.GPU_COUNT: "2",
    }
    annotations = {
        keys.GPU_FREE_MEMORY: "24576",
        keys.GPU_UTIL: "12.5",
        keys.COST: "3",
        keys.KV_CACHE_USAGE: "0.25",
    }
    node = node_facts("n1", labels, annotations, sink)
    assert (node.vendor, node.arch, node.gpu_count) == ("nvidia", "sm_89", 2)
    assert node.vram_per_gpu_mb == 24576
    assert (node.free_mb, node.util, node.cost, node.cache_usage) == (24576, 12.5, 3, 0.25)
    assert node.free_ratio == 0.5
    assert node.device_class == "vendor=NVIDIA,arch=SM_89,vram=24Gi,count=2,int4="
    assert sink.reports == []


def test_a_bare_node_has_no_vendor_and_neutral_terms() -> None:
    node = node_facts("bare", {}, {}, Sink())
    assert node.vendor is None
    assert node.arch is None
    assert node.free_mb is None
    assert (node.util, node.cost, node.cache_usage, node.free_ratio) == (0, 0, 0, 0)
    assert node.gpu_count == 1


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (keys.GPU_FREE_MEMORY, "lots"),
        (keys.GPU_FREE_MEMORY, "-5"),
        (keys.GPU_UTIL, "nan"),
        (keys.COST, "inf"),
        (keys.KV_CACHE_USAGE, "1,5"),
    ],
)
def test_malformed_annotations_are_absent_and_reported(key: str, value: str) -> None:
    sink = Sink()
    node = node_facts("n", {keys.GPU_VENDOR: "amd"}, {key: value}, sink)
    assert sink.reports == [(key, value)]
    assert node.free_mb is None
    assert (node.util, node.cost, node.cache_usage) == (0, 0, 0)


@pytest.mark.parametrize(("key", "value"), [(keys.GPU_COUNT, "two"), (keys.GPU_VRAM, "big")])
def test_malformed_labels_fall_back_and_are_reported(key: str, value: str) -> None:
    sink = Sink()
    node = node_facts("n", {keys.GPU_VENDOR: "amd", key: value}, {}, sink)
    assert sink.reports == [(key, value)]
    assert node.gpu_count == 1
    assert node.vram_per_gpu_mb is None


def test_free_ratio_is_clamped_to_one() -> None:
    labels = {keys.GPU_VRAM: "8Gi"}
    node = node_facts("n", labels, {keys.GPU_FREE_MEMORY: "99999"}, Sink())
    assert node.free_ratio == 1.0


def test_pod_facts_from_annotations_then_labels() -> None:
    sink = Sink()
    pod = pod_facts(
        namespace="team-a",
        name="p",
        labels={keys.MODEL: "from-label", keys.BACKEND: "vllm"},
        annotations={keys.BACKEND: "llama.cpp", keys.VRAM_ESTIMATE_MB: "8000"},
        gpu_count=2,
        sink=sink,
    )
    assert (pod.backend, pod.model, pod.vram_estimate_mb) == ("llamacpp", "from-label", 8000)
    assert pod.deployment == "from-label"
    assert pod.tenant(None) == "team-a"
    assert pod.tenant("tenant") == "team-a"
    assert not pod.terminal


def test_a_malformed_estimate_is_absent() -> None:
    sink = Sink()
    pod = pod_facts(
        namespace="ns",
        name="p",
        labels={},
        annotations={keys.VRAM_ESTIMATE_MB: "8 GB"},
        gpu_count=1,
        sink=sink,
    )
    assert pod.vram_estimate_mb is None
    assert sink.reports == [(keys.VRAM_ESTIMATE_MB, "8 GB")]


def test_requested_gpus_prefers_limits_per_container() -> None:
    sink = Sink()
    containers = [
        ({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}),
        ({}, {"amd.com/gpu": "1"}),
        ({"cpu": "4"}, {}),
        ({"nvidia.com/gpu": "x"}, {}),
    ]
    assert requested_gpus(containers, sink) == 3
    assert sink.reports == [("nvidia.com/gpu", "x")]


def test_backend_aliases_resolve() -> None:
    assert canonical_backend(" MLC ") == "mlc-llm"
    assert canonical_backend("") is None
    assert canonical_backend("unknown-server") == "unknown-server"


def test_device_class_of_an_unlabelled_node() -> None:
    assert device_class({}) == "vendor=,arch=,vram=,count=,int4="


def test_the_agents_device_class_label_names_the_class() -> None:
    labels = {
        "flexinfer.ai/gpu.vendor": "NVIDIA",
        "flexinfer.ai/gpu.vram": "24Gi",
        "flexinfer.ai/gpu.device-class": "nvidia-l4",
    }
    assert device_class(labels) == "nvidia-l4"
    # A blank label is no name: the GPU labels key it instead.
    labels["flexinfer.ai/gpu.device-class"] = " "
    assert device_class(labels) == "vendor=NVIDIA,arch=,vram=24Gi,count=,int4="


def test_free_ratio_follows_a_replaced_field() -> None:
    node = node_facts("n", {keys.GPU_VRAM: "8Gi"}, {keys.GPU_FREE_MEMORY: "4096"}, Sink())
    assert node.free_ratio == 0.5
    assert dataclasses.replace(node, free_mb=2048.0).free_ratio == 0.25
