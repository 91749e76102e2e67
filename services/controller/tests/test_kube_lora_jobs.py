"""The Jobs that fetch a LoRAAdapter into its base Model's cache volume and clean it up:
valid objects, arguments the registry client takes, and which Models have such a volume."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from flexinfer_common.api import LoRAAdapter, Model
from flexinfer_controller.backends.registry import default_backends
from flexinfer_controller.runtime.kubernetes.context import build_context
from flexinfer_controller.runtime.kubernetes.lora_jobs import cleanup_job, fetch_job, volume_problem
from flexinfer_controller.runtime.kubernetes.options import RenderOptions
from flexinfer_registry.client.mx_cli import build_parser

K8S = "1.31.0"


def model(source: str, **cache: Any) -> Model:
    spec: dict[str, Any] = {"backend": "vllm", "source": source, "gpu": {"vendor": "nvidia"}}
    if cache:
        spec["cache"] = cache
    return Model.model_validate(
        {"metadata": {"name": "qwen", "namespace": "ml", "uid": "u-1"}, "spec": spec}
    )


def adapter(name: str = "sql") -> LoRAAdapter:
    return LoRAAdapter.model_validate(
        {
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"modelRef": "qwen", "adapterName": f"{name}-lora",
                     "source": {"type": "HuggingFace", "uri": "org/sql-lora"}},
        }
    )  # fmt: skip


def context(m: Model) -> Any:
    return build_context(m, default_backends(), RenderOptions())


def test_the_fetch_job_downloads_into_the_adapters_own_directory() -> None:
    ctx = context(model("hf://Qwen/Qwen2.5-7B"))
    job, path = fetch_job(ctx, adapter(), "hf://org/sql-lora")
    kubernetes_validate.validate(job, K8S, strict=True)
    assert path == "/models/lora-adapters/ml_sql/huggingface/org/sql-lora"
    container = job["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])  # what the registry client accepts
    assert (args.name, args.provider, args.cache_dir) == (
        "org/sql-lora", "hf", "/models/lora-adapters/ml_sql",
    )  # fmt: skip
    meta = job["metadata"]
    assert meta["labels"]["flexinfer.ai/lora-adapter"] == "sql"
    assert meta["ownerReferences"][0]["name"] == "qwen"
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"] == {"claimName": "qwen-cache"}
    # Another source is another Job.
    other, oci_path = fetch_job(ctx, adapter(), "oci://reg.lan/loras/sql:v2")
    assert other["metadata"]["name"] != meta["name"]
    assert oci_path == "/models/lora-adapters/ml_sql/oci/reg.lan/loras/sql/v2"


def test_the_cleanup_job_removes_the_directory_and_then_itself() -> None:
    job = cleanup_job(context(model("hf://Qwen/Qwen2.5-7B")), adapter())
    kubernetes_validate.validate(job, K8S, strict=True)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["rm", "-rf", "--", "/models/lora-adapters/ml_sql"]
    assert job["spec"]["ttlSecondsAfterFinished"] == 300


@pytest.mark.parametrize(
    ("m", "mentions"),
    [
        (model("hf://Qwen/Qwen2.5-7B"), None),
        (model("hf://Qwen/Qwen2.5-7B", strategy="Local"), None),
        (model("pvc://models/qwen"), None),
        (model("file:///srv/models/qwen"), "node directory"),
        (model("hf://Qwen/Qwen2.5-7B", strategy="None"), "no cache volume"),
    ],
)
def test_adapters_are_fetched_only_into_a_volume(m: Model, mentions: str | None) -> None:
    why = volume_problem(context(m))
    assert (why is None) if mentions is None else (why is not None and mentions in why)
