"""Which registry token each pod the controller renders reads, and from where.

Engines read the P2P token (it opens only P2pService); the Jobs that download into the
cache (a Model's prefetch, a LoRAAdapter's fetch, a ModelCache's download) read the fetch
token (it opens only the ModelService calls a download makes). Both come from Secrets by
name: a rendered object never holds a token, and none names the registry's admin Secret.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from flexinfer_common.api import LoRAAdapter
from flexinfer_controller.backends.base import SecretKeyRef
from flexinfer_controller.backends.registry import default_backends
from flexinfer_controller.legacy.modelcache.plan import download_jobs
from flexinfer_controller.legacy.modelcache.plan import plan as cache_plan
from flexinfer_controller.legacy.modelcache.testing import CACHE_SAMPLES, sample_cache
from flexinfer_controller.legacy.modelcache.testing import OPTIONS as CACHE_OPTIONS
from flexinfer_controller.runtime.kubernetes import render_model
from flexinfer_controller.runtime.kubernetes.context import build_context
from flexinfer_controller.runtime.kubernetes.factory import render_options
from flexinfer_controller.runtime.kubernetes.lora_jobs import fetch_job
from flexinfer_controller.runtime.kubernetes.testing import SAMPLES, Sample
from flexinfer_controller.settings import ControllerSettings

Obj = dict[str, Any]
K8S = "1.31.0"
SAMPLE = {s.id: s for s in SAMPLES}
P2P = SecretKeyRef("flexinfer-registry-p2p-token", "token")
FETCH = SecretKeyRef("flexinfer-registry-fetch-token", "token")
REGISTRY_ADMIN = "flexinfer-registry-admin-token"
TOKEN_REF = {"secretKeyRef": {"name": FETCH.name, "key": FETCH.key}}


def env_of(container: Obj) -> dict[str, Obj]:
    """The container's variables by name."""
    return {e["name"]: e for e in container.get("env") or []}


def rendered(sample: Sample) -> list[Obj]:
    """The sample rendered with both Secrets named, as k8s/base configures the controller."""
    options = replace(
        sample.options(), registry_token_secret=P2P, registry_fetch_token_secret=FETCH
    )
    return render_model(sample.model(), default_backends(), options)


def test_the_prefetch_job_reads_the_fetch_token_and_the_engine_the_p2p_token() -> None:
    objects = rendered(SAMPLE["reference-cpu-file"])
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    engine = env_of(deployment["spec"]["template"]["spec"]["containers"][0])
    assert engine["FLEXINFER_ENGINE_REGISTRY_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": P2P.name, "key": P2P.key}
    }
    assert FETCH.name not in str(deployment), "an engine never gets the fetch token"
    assert REGISTRY_ADMIN not in str(deployment), "an engine never gets the admin token"

    prefetching = rendered(SAMPLE["vllm-nvidia-pvc-prefetch"])
    [job] = [o for o in prefetching if o["kind"] == "Job"]
    kubernetes_validate.validate(job, K8S, strict=True)
    fetcher = env_of(job["spec"]["template"]["spec"]["containers"][0])
    assert fetcher["FLEXINFER_REGISTRY_AUTH_TOKEN"]["valueFrom"] == TOKEN_REF
    assert P2P.name not in str(job)
    assert REGISTRY_ADMIN not in str(job), "a download Job never gets the admin token"


def test_without_the_setting_the_jobs_send_no_token() -> None:
    sample = SAMPLE["vllm-nvidia-pvc-prefetch"]
    objects = render_model(sample.model(), default_backends(), sample.options())
    [job] = [o for o in objects if o["kind"] == "Job"]
    assert "FLEXINFER_REGISTRY_AUTH_TOKEN" not in env_of(
        job["spec"]["template"]["spec"]["containers"][0]
    )


def test_a_lora_fetch_job_reads_the_fetch_token() -> None:
    sample = SAMPLE["vllm-nvidia-pvc-prefetch"]
    options = replace(sample.options(), registry_fetch_token_secret=FETCH)
    ctx = build_context(sample.model(), default_backends(), options)
    adapter = LoRAAdapter.model_validate(
        {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "LoRAAdapter",
            "metadata": {"name": "sql", "namespace": "ml", "uid": "u-1"},
            "spec": {
                "modelRef": "qwen-7b",
                "adapterName": "sql",
                "source": {"type": "HuggingFace", "uri": "org/sql-lora"},
            },
        }
    )
    job, _ = fetch_job(ctx, adapter, "hf://org/sql-lora")
    kubernetes_validate.validate(job, K8S, strict=True)
    fetcher = env_of(job["spec"]["template"]["spec"]["containers"][0])
    assert fetcher["FLEXINFER_REGISTRY_AUTH_TOKEN"]["valueFrom"] == TOKEN_REF


def test_a_modelcache_download_job_reads_the_fetch_token() -> None:
    plan = cache_plan(sample_cache(CACHE_SAMPLES[0]))
    options = replace(CACHE_OPTIONS, token=FETCH)
    jobs = download_jobs(plan, options, ["gpu-1"])
    assert jobs
    for job in jobs:
        fetcher = env_of(job["spec"]["template"]["spec"]["containers"][0])
        assert fetcher["FLEXINFER_REGISTRY_AUTH_TOKEN"]["valueFrom"] == TOKEN_REF


def test_the_fetch_token_secret_setting_reaches_the_render_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEXINFER_KUBERNETES_REGISTRY_FETCH_TOKEN_SECRET", FETCH.name)
    options = render_options(ControllerSettings())
    assert options.registry_fetch_token_secret == FETCH
    assert options.registry_token_secret is None
