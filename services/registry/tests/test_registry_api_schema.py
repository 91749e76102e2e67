"""The REST admin API against its own OpenAPI document (schemathesis): every generated
request gets an answer the document describes (status, content type, body schema), and
none is a 5xx. The registry runs as its own process, holding a downloaded model and a P2P
source, so lookups find something; its memory is measured before and after the run."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from flexinfer_registry.testing.process import RegistryProcess, registry_process

EXAMPLES = 60
"""Cases per operation in CI; the run takes ~20 s on two shared cores."""


def _populate(registry: RegistryProcess, models: Path) -> None:
    """A DOWNLOADED model and a READY P2P source."""
    with grpc.insecure_channel(registry.grpc_address) as channel:
        stub = mx_model_grpc.ModelServiceStub(channel)
        request = mx_model.ModelDownloadRequest(model_name=f"file://{models}/tiny")
        assert list(stub.EnsureModelDownloaded(request))[-1].status == mx_model.DOWNLOADED
        p2p = mx_p2p_grpc.P2pServiceStub(channel)
        identity = mx_p2p.SourceIdentity(mx_version="0.7.0", model_name="org/model")
        worker = mx_p2p.WorkerMetadata(worker_rank=0, accelerator="cuda")
        published = p2p.PublishMetadata(
            mx_p2p.PublishMetadataRequest(identity=identity, worker=worker, worker_id="w0")
        )
        p2p.UpdateStatus(
            mx_p2p.UpdateStatusRequest(
                mx_source_id=published.mx_source_id, worker_id="w0", status=2
            )
        )


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    root = tmp_path_factory.mktemp("schema")
    models = root / "models"
    (models / "tiny").mkdir(parents=True)
    (models / "tiny" / "config.json").write_text("{}")
    (models / "tiny" / "model.safetensors").write_bytes(os.urandom(4096))
    env = {
        "FLEXINFER_REGISTRY_CACHE_DIR": str(root / "cache"),
        "FLEXINFER_REGISTRY_FILE_ROOTS": str(models),
    }
    with registry_process(root / "run", env) as running:
        _populate(running, models)
        yield running


@pytest.fixture(scope="module")
def cases() -> Iterator[Counter[str]]:
    """Cases run per operation; printed at the end (``-s``)."""
    counts: Counter[str] = Counter()
    yield counts
    print(f"\nschemathesis cases per operation: {dict(counts)}, total {sum(counts.values())}")


@pytest.fixture(scope="module")
def api_schema(registry: RegistryProcess) -> Any:
    return schemathesis.openapi.from_url(f"{registry.http_url}/openapi.json")


@pytest.fixture(scope="module")
def memory(registry: RegistryProcess) -> Iterator[None]:
    """The registry's RSS before and after every case ran."""
    before = registry.rss_kib()
    yield
    after = registry.rss_kib()
    print(f"\nregistry RSS: {before} KiB before the schemathesis run, {after} KiB after")
    assert after - before < 64 * 1024, "the admin API leaks memory"


def _operations(api_schema: Any) -> list[Any]:
    return [result.ok() for result in api_schema.get_all_operations()]


def _fuzz(operation: Any, cases: Counter[str], mode: GenerationMode) -> None:
    """EXAMPLES generated cases of one operation, each answered as documented: valid ones
    accepted, invalid ones (NEGATIVE) refused with a documented 4xx."""
    label = f"{mode.value} {operation.method.upper()} {operation.path}"

    @given(case=operation.as_strategy(mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        cases[label] += 1
        response = case.call()
        assert response.status_code < 500, response.text
        case.validate_response(response)

    check()


def test_admin_api_answers_as_documented(
    api_schema: Any, memory: None, cases: Counter[str]
) -> None:
    """Every operation, EXAMPLES generated cases each (schemathesis's strategies and checks,
    driven by hypothesis here: its pytest plugin does not run under this pytest)."""
    operations = _operations(api_schema)
    assert len(operations) == 10  # the admin routes, the two probes and /metrics
    for operation in operations:
        _fuzz(operation, cases, GenerationMode.POSITIVE)
        if _has_parameters(operation):  # nothing to get wrong in the others
            _fuzz(operation, cases, GenerationMode.NEGATIVE)
    assert all(cases[f"positive {o.method.upper()} {o.path}"] > 0 for o in operations)


def _has_parameters(operation: Any) -> bool:
    return bool(operation.definition.raw.get("parameters"))


def test_every_operation_documents_its_errors(registry: RegistryProcess) -> None:
    """Each operation lists the OpenAI-shaped error body for every status it can answer,
    and no 422 (validation errors are answered 400)."""
    document = httpx.get(f"{registry.http_url}/openapi.json").json()
    for path, operations in document["paths"].items():
        if not path.startswith("/v1/registry/"):
            continue  # the probes and /metrics: documented by flexinfer_common
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert {"200", "401", "503"} <= codes, (method, path)
            assert "422" not in codes, (method, path)
            for code in codes - {"200"}:
                body = operation["responses"][code]["content"]["application/json"]["schema"]
                assert body == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, code)
