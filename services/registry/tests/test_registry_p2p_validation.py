"""Every identity a client sends is checked, bounded and refused with details, through the
modelexpress package's own stubs and clients; nothing refused is ever stored."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status  # type: ignore[import-untyped]
from modelexpress.client import MxClient

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import LimitSettings, RegistrySettings
from flexinfer_registry.testing.fakes import OneProvider, ScriptedProvider

LIMITS = LimitSettings(tensors_per_worker=10, workers_per_source=2)


class Registry:
    """A running registry: P2P and Model stubs, and its admin API."""

    def __init__(self, p2p: Any, models: Any, http: httpx.AsyncClient, address: str) -> None:
        self.p2p, self.models, self.http, self.address = p2p, models, http, address


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[Registry]:
    settings = RegistrySettings(
        host="127.0.0.1", port=0, grpc_port=0, cache_dir=tmp_path / "cache", limits=LIMITS
    )
    provider = OneProvider(ScriptedProvider({"config.json": b"{}"}))
    app: Any = create_app(settings, providers=provider)
    async with (
        serve_in_background(app, settings.host) as url,
        grpc.aio.insecure_channel(app.state.grpc_address) as channel,
        httpx.AsyncClient(base_url=url) as http,
    ):
        p2p = mx_p2p_grpc.P2pServiceStub(channel)
        models = mx_model_grpc.ModelServiceStub(channel)
        yield Registry(p2p, models, http, str(app.state.grpc_address))


def identity(**fields: Any) -> Any:
    """What vLLM's build_source_identity sends for a Hugging Face model."""
    values: dict[str, Any] = {
        "mx_version": "0.7.0",
        "mx_source_type": mx_p2p.MX_SOURCE_TYPE_WEIGHTS,
        "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "backend_framework": mx_p2p.BACKEND_FRAMEWORK_VLLM,
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "expert_parallel_size": 1,
        "dtype": "bfloat16",
        "quantization": "fp8",
        "revision": "0e9e39f249a16976918f6564b8830bc894c89659",
    }
    values.update(fields)
    return mx_p2p.SourceIdentity(**values)


def worker(count: int = 3, **fields: Any) -> Any:
    """What modelexpress's publish_metadata_and_ready sends for one rank."""
    descriptors = [
        mx_p2p.TensorDescriptor(
            name=f"model.layers.{i}.self_attn.qkv_proj.weight",
            addr=0x7F0000000000 + i * 4096,
            size=4096,
            device_id=0,
            dtype="torch.bfloat16",
        )
        for i in range(count)
    ]
    values: dict[str, Any] = {
        "worker_rank": 0,
        "metadata_endpoint": "10.0.3.17:5555",
        "agent_name": "mx-agent-3f2a9c1b",
        "worker_grpc_endpoint": "10.0.3.17:6555",
        "accelerator": "cuda",
        "topology": {"rack": "r3", "host": "node7"},
        "tensor_source": mx_p2p.TensorSourceMetadata(tensors=descriptors),
    }
    values.update(fields)
    return mx_p2p.WorkerMetadata(**values)


def publish(**fields: Any) -> Any:
    values: dict[str, Any] = {
        "identity": identity(),
        "worker": worker(),
        "worker_id": uuid.uuid4().hex[:8],
        "pod_name": "vllm-llama-0",
        "pod_uid": str(uuid.uuid4()),
        "pod_namespace": "inference",
    }
    values.update(fields)
    return mx_p2p.PublishMetadataRequest(**values)


async def refused(call: Any) -> list[tuple[str, str]]:
    """The (field, description) pairs of an INVALID_ARGUMENT answer."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    status = rpc_status.from_call(info.value)
    assert status is not None
    (detail,) = status.details
    bad = error_details_pb2.BadRequest()
    assert detail.Unpack(bad)
    assert info.value.details().startswith(bad.field_violations[0].field)
    return [(v.field, v.description) for v in bad.field_violations]


async def stored(registry: Registry) -> list[Any]:
    return list((await registry.p2p.ListSources(mx_p2p.ListSourcesRequest())).instances)


async def test_what_modelexpress_clients_send_is_accepted(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """modelexpress's own MxClient, with the pod fields its envs read from the downward API."""
    monkeypatch.setenv("POD_NAME", "vllm-llama-0.vllm-llama")
    monkeypatch.setenv("POD_NAMESPACE", "inference")
    monkeypatch.setenv("POD_UID", str(uuid.uuid4()))
    local = identity(
        model_name="/models/Qwen2.5-7B-Instruct", extra_parameters={"triton_key": "ab12"}
    )

    def use_client() -> list[str]:
        client = MxClient(server_url=registry.address)
        try:
            ids = [client.publish_metadata(identity(), worker(), uuid.uuid4().hex[:8])]
            ids.append(client.publish_metadata(local, worker(count=10), "rank-1"))
            return ids
        finally:
            client.close()

    ids = await asyncio.to_thread(use_client)
    assert len(set(ids)) == 2
    assert len(await stored(registry)) == 2


@pytest.mark.parametrize(
    ("model_name", "why"),
    [
        ("org/model\x00", "'\\x00'"),
        ("org/\x1b[31mred", "'\\x1b'"),
        ("../../etc/passwd", "'..'"),
        ("org/../x", "'..'"),
        ("org/model name", "' '"),
        ("org\\model", "'\\\\'"),
        ("x" * (5 << 20), "over the limit of 1024"),
    ],
    ids=["nul", "escape", "dotdot", "inner-dotdot", "space", "backslash", "5MB"],
)
async def test_hostile_model_names_are_refused(
    registry: Registry, model_name: str, why: str
) -> None:
    violations = await refused(
        registry.p2p.PublishMetadata(publish(identity=identity(model_name=model_name)))
    )
    assert [field for field, _ in violations] == ["identity.model_name"]
    assert why in violations[0][1]
    assert await stored(registry) == []


async def test_huge_and_malformed_pod_fields_are_refused(registry: Registry) -> None:
    request = publish(pod_namespace="n" * 100_000, pod_name="Vllm_0", pod_uid="not-a-uuid")
    violations = dict(await refused(registry.p2p.PublishMetadata(request)))
    assert set(violations) == {"pod_namespace", "pod_name", "pod_uid"}
    assert "DNS label" in violations["pod_namespace"]
    assert len(violations["pod_namespace"]) < 200  # the 100 KB value is not echoed back
    assert await stored(registry) == []


async def test_an_empty_request_is_refused(registry: Registry) -> None:
    violations = await refused(registry.p2p.PublishMetadata(mx_p2p.PublishMetadataRequest()))
    assert violations == [("identity.model_name", "is required")]


async def test_every_violation_of_a_request_is_reported(registry: Registry) -> None:
    bad_identity = identity(
        dtype="bf16; drop", mx_version="0.7.0\n", extra_parameters={"k\x00": "v"}
    )
    bad_worker = worker(accelerator="cu da", agent_name="a" * 300, topology={"rack": "r 3"})
    request = publish(identity=bad_identity, worker=bad_worker, worker_id="w/1")
    fields = [field for field, _ in await refused(registry.p2p.PublishMetadata(request))]
    assert fields == [
        "identity.mx_version",
        "identity.dtype",
        "identity.extra_parameters['k\\x00']",
        "worker_id",
        "worker.accelerator",
        "worker.agent_name",
        "worker.topology['rack']",
    ]


async def test_tensors_per_worker_are_bounded(registry: Registry) -> None:
    assert (await registry.p2p.PublishMetadata(publish(worker=worker(count=10)))).success
    violations = await refused(registry.p2p.PublishMetadata(publish(worker=worker(count=11))))
    assert violations == [("worker.tensor_source.tensors", "has 11 tensors, over the limit of 10")]
    legacy = worker(count=0, tensors=[mx_p2p.TensorDescriptor(name="")])
    assert await refused(registry.p2p.PublishMetadata(publish(worker=legacy))) == [
        ("worker.tensors[0].name", "is required")
    ]


async def test_workers_per_source_are_bounded(registry: Registry) -> None:
    for worker_id in ("w0", "w1", "w0"):  # a republish of a known worker always fits
        assert (await registry.p2p.PublishMetadata(publish(worker_id=worker_id))).success
    violations = await refused(registry.p2p.PublishMetadata(publish(worker_id="w2")))
    assert violations[0][0] == "worker_id"
    assert "already has 2 workers" in violations[0][1]
    other = publish(identity=identity(model_name="org/other"), worker_id="w2")
    assert (await registry.p2p.PublishMetadata(other)).success
    assert len(await stored(registry)) == 3


async def test_lookups_check_their_identities(registry: Registry) -> None:
    bad_filter = mx_p2p.ListSourcesRequest(model_name_filter="a\x00")
    assert [f for f, _ in await refused(registry.p2p.ListSources(bad_filter))] == [
        "model_name_filter"
    ]
    bad_identity = mx_p2p.ListSourcesRequest(identity=identity(model_name="x" * 2000))
    assert [f for f, _ in await refused(registry.p2p.ListSources(bad_identity))] == [
        "identity.model_name"
    ]
    get = mx_p2p.GetMetadataRequest(mx_source_id="../../x", worker_id="w\n")
    assert [f for f, _ in await refused(registry.p2p.GetMetadata(get))] == [
        "mx_source_id",
        "worker_id",
    ]
    update = mx_p2p.UpdateStatusRequest(
        mx_source_id="0123456789abcdef", worker_id="w", status=2, source_load=float("nan")
    )
    assert [f for f, _ in await refused(registry.p2p.UpdateStatus(update))] == ["source_load"]
    answer = await registry.http.get("/v1/registry/sources", params={"model_name": "a\x00"})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "model_name_filter"


@pytest.mark.parametrize(
    "name",
    ["a\x00b", "x" * (5 << 20), "../etc", "org/mo del"],
    ids=["nul", "5MB", "dotdot", "space"],
)
async def test_model_service_names_are_checked_in_every_rpc(registry: Registry, name: str) -> None:
    stub = registry.models
    files = mx_model.ModelFilesRequest(model_name=name)

    async def ensure() -> None:
        request = mx_model.ModelDownloadRequest(model_name=name)
        [u async for u in stub.EnsureModelDownloaded(request)]

    async def stream() -> None:
        [c async for c in stub.StreamModelFiles(files)]

    calls = [ensure(), stream(), stub.ListModelFiles(files)]
    calls.append(stub.DeleteModel(mx_model.DeleteModelRequest(model_name=name)))
    for call in calls:
        assert [f for f, _ in await refused(call)] == ["model_name"]
    assert (await registry.http.get("/v1/registry/models")).json() == []
