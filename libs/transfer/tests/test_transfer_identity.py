"""SourceIdentity/mx_source_id (flexinfer_common.mx_identity, shared with the registry)
against modelexpress's on the wire, the copied p2p stubs against the registry's, and
memory pools."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import modelexpress.p2p_pb2 as mx_p2p
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from modelexpress.metadata.source_id import compute_mx_source_id as mx_compute

import flexinfer_registry._generated.model_express as registry_generated
import flexinfer_transfer._generated as transfer_generated
from flexinfer_common.mx_identity import SourceIdentity, compute_mx_source_id
from flexinfer_transfer.pools import Region, memory_type, pools
from flexinfer_transfer.source_identity import identity_from_proto, identity_to_proto

text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
identities = st.builds(
    SourceIdentity,
    mx_version=text,
    mx_source_type=st.integers(0, 9),
    model_name=text,
    backend_framework=st.integers(0, 3),
    tensor_parallel_size=st.integers(0, 2**32 - 1),
    pipeline_parallel_size=st.integers(0, 8),
    expert_parallel_size=st.integers(0, 8),
    dtype=st.sampled_from(["", "bfloat16", "BF16", "float16"]),
    quantization=st.sampled_from(["", "fp8", "FP8", "none"]),
    # Case-colliding keys ("K" and "k") exercise the first-kept rule.
    extra_parameters=st.dictionaries(st.sampled_from(["K", "k", "a", "B", "é"]), text),
    revision=text,
    backend_framework_version=text,
    torch_version=text,
    cuda_version=text,
    triton_version=text,
    gpu_arch=text,
    compile_config_digest=text,
)


@settings(max_examples=300, deadline=None)
@given(identities)
def test_mx_source_id_matches_modelexpress_over_the_wire(identity: SourceIdentity) -> None:
    ours = compute_mx_source_id(identity)
    wire = identity_to_proto(identity).SerializeToString()
    assert ours == mx_compute(mx_p2p.SourceIdentity.FromString(wire))
    assert identity_from_proto(identity_to_proto(identity)) == identity
    assert len(ours) == 16
    assert int(ours, 16) >= 0


def test_mx_source_id_is_pinned() -> None:
    # A change of the canonical JSON would move every source's id: pinned here.
    identity = SourceIdentity(mx_version="0.7.0", model_name="Org/Model", dtype="BF16")
    assert identity.mx_source_id == mx_compute(identity_to_proto(identity))
    assert identity.mx_source_id == compute_mx_source_id(
        dataclasses.replace(identity, model_name="org/model", dtype="bf16")
    )
    assert identity.mx_source_id != dataclasses.replace(identity, revision="abc").mx_source_id


def test_p2p_stubs_are_the_registrys() -> None:
    ours = Path(transfer_generated.__file__).parent
    theirs = Path(registry_generated.__file__).parent
    for name in ("p2p_pb2.py", "p2p_pb2.pyi"):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    grpc_ours = (ours / "p2p_pb2_grpc.py").read_text()
    grpc_theirs = (theirs / "p2p_pb2_grpc.py").read_text()
    assert grpc_ours == grpc_theirs.replace(
        "flexinfer_registry._generated.model_express", "flexinfer_transfer._generated"
    )


def test_pools_merge_touching_regions_per_device() -> None:
    regions = [
        Region(100, 50),
        Region(150, 10),  # touches the first
        Region(120, 5),  # inside it
        Region(200, 8),  # a gap before it
        Region(150, 10, device_id=1),  # same addresses, another device
        Region(300, 0),  # empty: nothing to register
    ]
    assert pools(regions) == [Region(100, 60), Region(200, 8), Region(150, 10, device_id=1)]


def test_memory_types() -> None:
    assert memory_type("cpu") == "DRAM"
    assert memory_type("cuda:1") == "VRAM"
    with pytest.raises(ValueError, match="no NIXL memory type for 'meta'"):
        memory_type("meta")
