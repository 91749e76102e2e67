"""The legacy ModelCache's plan and render, without a cluster: storage per strategy, the
source schemes the registry fetches, the download Job's command, and its name's hash."""

from __future__ import annotations

from typing import Any

import pytest

from flexinfer_controller.legacy.modelcache.plan import (
    CacheSpecError,
    claim_object,
    download_job,
    download_jobs,
    plan,
)
from flexinfer_controller.legacy.modelcache.status import Observed, size_of, verdict
from flexinfer_controller.legacy.modelcache.testing import (
    CACHE_SAMPLES,
    OPTIONS,
    UID,
    cache_manifest,
    sample_cache,
)
from flexinfer_registry.client.mx_cli import build_parser

SAMPLE = {m["metadata"]["name"]: m for m in CACHE_SAMPLES}


def _cache(**spec: Any) -> Any:
    return sample_cache(cache_manifest("c", **{"source": "hf://org/m", **spec}))


def test_the_download_job_container_is_pinned() -> None:
    job = download_job(plan(sample_cache(SAMPLE["qwen-coder-7b"])), OPTIONS)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "flexinfer_registry.client.mx_cli"]
    assert container["args"] == [
        "--server", "flexinfer-registry.flexinfer.svc:8001", "model", "download",
        "Qwen/Qwen2.5-Coder-7B-Instruct", "--provider", "hf", "--strategy", "SmartFallback",
        "--cache-dir", "/models/qwen-coder-7b", "--termination-log", "/dev/termination-log",
    ]  # fmt: skip
    token = {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
    assert container["env"] == [
        {"name": "HOME", "value": "/tmp"},
        {"name": "HF_TOKEN", "valueFrom": token},
    ]
    # The registry client accepts exactly these arguments.
    parsed = build_parser().parse_args(container["args"])
    assert (parsed.provider, parsed.cache_dir) == ("hf", "/models/qwen-coder-7b")
    assert parsed.termination_log == "/dev/termination-log"
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"] == {"claimName": "qwen-coder-7b-cache"}


def test_shared_pvc_claim_owner_and_path() -> None:
    cache_plan = plan(sample_cache(SAMPLE["qwen-coder-7b"]))
    claim = claim_object(cache_plan)
    assert claim is not None
    assert claim["metadata"]["name"] == "qwen-coder-7b-cache"
    assert claim["spec"]["storageClassName"] == "longhorn"
    assert claim["spec"]["resources"] == {"requests": {"storage": "40Gi"}}
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["apiVersion"], owner["uid"]) == (
        "ModelCache", "ai.flexinfer/v1alpha1", UID,
    )  # fmt: skip
    assert claim["metadata"]["labels"]["flexinfer.ai/modelcache"] == "qwen-coder-7b"
    assert (
        cache_plan.path
        == "pvc://qwen-coder-7b-cache/qwen-coder-7b/huggingface/Qwen/Qwen2.5-Coder-7B-Instruct"
    )


def test_auto_is_a_shared_pvc_without_a_storage_class_by_default() -> None:
    cache_plan = plan(sample_cache(SAMPLE["from-s3"]))
    assert cache_plan.strategy == "SharedPVC"
    claim = claim_object(cache_plan)
    assert claim is not None
    assert "storageClassName" not in claim["spec"]
    assert cache_plan.path == "pvc://from-s3-cache/from-s3/s3/bucket/models/m"


def test_an_existing_claim_is_reused_with_the_model_in_a_subdirectory() -> None:
    cache_plan = plan(sample_cache(SAMPLE["llama-shared"]))
    assert claim_object(cache_plan) is None
    assert cache_plan.path == "pvc://team-models/llama/8b/huggingface/meta-llama/Llama-3.1-8B"
    job = download_job(cache_plan, OPTIONS)
    assert "--cache-dir" in (args := job["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args[args.index("--cache-dir") + 1] == "/models/llama/8b"


def test_node_local_gets_one_pinned_job_per_node_on_the_host_path() -> None:
    cache_plan = plan(sample_cache(SAMPLE["phi-local"]))
    assert cache_plan.node_selector == {"flexinfer.ai/gpu.vendor": "nvidia"}
    jobs = download_jobs(cache_plan, OPTIONS, ["b", "a"])
    assert [j["spec"]["template"]["spec"]["nodeName"] for j in jobs] == ["a", "b"]
    assert len({j["metadata"]["name"] for j in jobs}) == 2
    volume = jobs[0]["spec"]["template"]["spec"]["volumes"][0]
    assert volume["hostPath"] == {"path": "/var/lib/flexinfer/models", "type": "DirectoryOrCreate"}
    assert (
        cache_plan.path == "file:///var/lib/flexinfer/models/phi-local/huggingface/microsoft/phi-2"
    )
    assert plan(_cache(storageStrategy="NodeLocal")).node_selector == {
        "nvidia.com/gpu.present": "true"
    }


def test_ephemeral_has_nothing_to_fill_and_is_ready() -> None:
    cache_plan = plan(sample_cache(SAMPLE["scratch"]))
    assert claim_object(cache_plan) is None
    assert download_jobs(cache_plan, OPTIONS, ["n"]) == []
    found = verdict(cache_plan, Observed())
    assert (found.phase, found.reason) == ("Ready", "Ephemeral")


@pytest.mark.parametrize(
    "change",
    [{"source": "hf://org/other"}, {"modelPath": "x"}, {"existingClaimName": "pvc"},
     {"secretRef": "tok"}, {"ociRegistrySecretRef": "reg"}],
)  # fmt: skip
def test_a_spec_change_renames_the_job(change: dict[str, str]) -> None:
    before = download_job(plan(_cache()), OPTIONS)["metadata"]["name"]
    after = download_job(plan(_cache(**change)), OPTIONS)["metadata"]["name"]
    assert before != after
    assert download_job(plan(_cache()), OPTIONS)["metadata"]["name"] == before


def test_a_private_oci_source_is_fetched_by_the_job_with_the_secrets_docker_config() -> None:
    job = download_job(plan(_cache(source="oci://ghcr.io/org/m:v1", ociRegistrySecretRef="reg")),
                       OPTIONS)  # fmt: skip
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    parsed = build_parser().parse_args(container["args"])
    # The cache's own credentials: the shared registry is not asked to fetch with them.
    assert parsed.strategy == "DirectOnly"
    assert {"name": "FLEXINFER_REGISTRY_OCI_AUTH_FILE",
            "value": "/var/run/flexinfer/oci-auth/config.json"} in container["env"]  # fmt: skip
    assert {"name": "oci-auth", "mountPath": "/var/run/flexinfer/oci-auth",
            "readOnly": True} in container["volumeMounts"]  # fmt: skip
    secret = {"secretName": "reg", "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
              "defaultMode": 0o440}  # fmt: skip
    assert pod["volumes"][1] == {"name": "oci-auth", "secret": secret}
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "c-cache"}


def test_a_registry_secret_leaves_other_sources_to_the_registry() -> None:
    job = download_job(plan(_cache(ociRegistrySecretRef="reg")), OPTIONS)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert build_parser().parse_args(container["args"]).strategy == "SmartFallback"


@pytest.mark.parametrize(
    ("source", "fetched"),
    [("HF://org/m", "org/m"), ("huggingface://org/m", "org/m"), ("hf://org/m", "org/m"),
     ("s3://b/k", "s3://b/k"), ("gs://b/k", "gs://b/k"), ("NGC://org/team/m", "ngc://org/team/m"),
     ("oci://ghcr.io/org/m:v1", "oci://ghcr.io/org/m:v1")],
)  # fmt: skip
def test_the_registry_schemes_are_fetched(source: str, fetched: str) -> None:
    fetch = plan(_cache(source=source)).fetch
    assert fetch is not None
    assert fetch.name == fetched


@pytest.mark.parametrize(
    ("spec", "reason"),
    [({"source": "mlc://mlc-ai/Llama-3-8B-q4f16_1-MLC"}, "UnsupportedSource"),
     ({"source": "oras://ghcr.io/org/m@sha256:" + "a" * 64}, "UnsupportedSource"),
     ({"source": "hf://"}, "InvalidSource"),
     ({"storageStrategy": "Tmpfs"}, "UnsupportedStrategy"),
     ({"modelPath": "../escape"}, "InvalidModelPath"),
     ({"modelPath": "/abs"}, "InvalidModelPath")],
)  # fmt: skip
def test_what_no_job_can_serve_is_a_permanent_error(spec: dict[str, str], reason: str) -> None:
    with pytest.raises(CacheSpecError) as caught:
        plan(_cache(**spec))
    assert caught.value.reason == reason
    if reason == "UnsupportedSource":
        assert "huggingface://, gcs://, gs://, hf://, ngc://, oci://, s3://" in caught.value.message


@pytest.mark.parametrize(
    ("message", "size"),
    [('{"sizeBytes": 42}', 42), ('{"sizeBytes": 0}', 0), ("", None), (None, None),
     ("not json", None), ("[1]", None), ('{"sizeBytes": -1}', None),
     ('{"sizeBytes": "42"}', None), ('{"sizeBytes": true}', None), ('{"other": 1}', None)],
)  # fmt: skip
def test_the_size_a_prefetch_container_reports(message: str | None, size: int | None) -> None:
    assert size_of(message) == size
