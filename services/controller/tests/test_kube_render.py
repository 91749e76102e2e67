"""The Kubernetes objects of a Model: valid for 1.31, and what each backend runs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest
from pydantic import ValidationError

from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.backends.base import SecretKeyRef, UnsupportedBackendError
from flexinfer_controller.backends.registry import default_backends
from flexinfer_controller.flashload.__main__ import PROG, cleanup_parser, copy_parser
from flexinfer_controller.legacy.modelcache.plan import claim_object, download_jobs
from flexinfer_controller.legacy.modelcache.plan import plan as cache_plan
from flexinfer_controller.legacy.modelcache.testing import CACHE_SAMPLES, sample_cache
from flexinfer_controller.legacy.modelcache.testing import OPTIONS as CACHE_OPTIONS
from flexinfer_controller.quantize.__main__ import parser as quantize_parser
from flexinfer_controller.runtime.kubernetes import RenderOptions, render_cleanup, render_model
from flexinfer_controller.runtime.kubernetes.factory import render_options
from flexinfer_controller.runtime.kubernetes.names import object_name
from flexinfer_controller.runtime.kubernetes.testing import SAMPLES, UID, Sample, manifest
from flexinfer_controller.settings import ControllerSettings
from flexinfer_registry.client.mx_cli import build_parser

Obj = dict[str, Any]
K8S = "1.31.0"
SAMPLE = {s.id: s for s in SAMPLES}
GPU_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def objects(sample: Sample) -> list[Obj]:
    return render_model(sample.model(), default_backends(), sample.options())


def one(sample: Sample, kind: str, component: str | None = None) -> Obj:
    found = [
        o
        for o in objects(sample)
        if o["kind"] == kind
        and (component is None or o["metadata"]["labels"]["flexinfer.ai/component"] == component)
    ]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def pod(sample: Sample) -> Obj:
    spec: Obj = one(sample, "Deployment")["spec"]["template"]["spec"]
    return spec


def engine(sample: Sample) -> Obj:
    container: Obj = pod(sample)["containers"][0]
    return container


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_every_object_is_valid_for_kubernetes_1_31(sample: Sample) -> None:
    rendered = objects(sample) + render_cleanup(
        sample.model(), default_backends(), sample.options(), ["gpu-1"], keep=["ml/other"]
    )
    for obj in rendered:
        kubernetes_validate.validate(obj, K8S, strict=True)
        assert obj["metadata"]["namespace"] == sample.model().metadata.namespace
        assert len(obj["metadata"]["name"]) <= 63


@pytest.mark.parametrize(
    "manifest", CACHE_SAMPLES, ids=[m["metadata"]["name"] for m in CACHE_SAMPLES]
)
def test_every_modelcache_object_is_valid_for_kubernetes_1_31(manifest: Obj) -> None:
    plan = cache_plan(sample_cache(manifest))
    rendered = [o for o in [claim_object(plan)] if o is not None]
    rendered += download_jobs(plan, CACHE_OPTIONS, ["gpu-1", "gpu-2.example.com"])
    for obj in rendered:
        kubernetes_validate.validate(obj, K8S, strict=True)
        assert obj["metadata"]["namespace"] == "ml"
        assert len(obj["metadata"]["name"]) <= 63


def test_every_backend_of_the_registry_is_covered() -> None:
    backends = default_backends()
    covered = {backends.get(s.model().spec.backend).name for s in SAMPLES}  # type: ignore[union-attr]
    assert covered == set(backends.names())


PINNED = {
    "reference-cpu-file": (
        "flexinfer/engine:latest", ["python", "-m", "flexinfer_engine", "serve"],
        ["--model-dir", "/models", "--served-model-name", "tiny", "--host", "0.0.0.0",
         "--port", "8000", "--lora-root", "/models"], 8000,  # adapters: the Model's volume
    ),
    "vllm-nvidia-pvc-prefetch": (
        "vllm/vllm-openai:latest", None,
        ["--host", "0.0.0.0", "--port", "8000", "--model",
         "/models/huggingface/Qwen/Qwen2.5-7B-Instruct", "--dtype", "bfloat16",
         "--max-model-len", "8192", "--gpu-memory-utilization", "0.9",
         "--served-model-name", "qwen-7b"], 8000,
    ),
    "vllm-shared-memory-flash": (
        "vllm/vllm-openai:latest", None,
        ["--host", "0.0.0.0", "--port", "8000", "--model", "/dev/shm/ml_llama-3.1-8b",
         "--served-model-name", "llama-3.1-8b"], 8000,
    ),
    "vllm-quantize-gpu": (
        "vllm/vllm-openai:latest", None,
        ["--host", "0.0.0.0", "--port", "8000",
         "--model", "/models/s3/models/mistral-7b-awq-76f46168",
         "--served-model-name", "mistral-awq"], 8000,
    ),
    "ollama-amd-pull": ("ollama/ollama:rocm", None, ["serve"], 11434),
    "llamacpp-cpu-local": (
        "ghcr.io/ggerganov/llama.cpp:server", ["/opt/src/llama.cpp/build/bin/llama-server"],
        ["--host", "0.0.0.0", "--port", "8080", "--model",
         "/dev/shm/ml_qwen-gguf/qwen2.5-7b-instruct-q4_k_m.gguf", "--ctx-size", "4096",
         "--n-gpu-layers", "0"], 8080,
    ),
    "mlc-llm-nvidia-existing-pvc": (
        "ghcr.io/mlc-ai/mlc-llm:cuda", ["python", "-m", "mlc_llm"],
        ["serve", "/models/mlc/phi-3", "--host", "0.0.0.0", "--port", "8000", "--overrides",
         "max_num_sequence=4"], 8000,
    ),
    "diffusers-nvidia-quantize-cpu": (
        "registry.harbor.lan/library/diffusers-api:cuda", None, None, 8000,
    ),
    "comfyui-nvidia-configmap": (
        "comfyanonymous/comfyui:latest", ["python", "main.py"],
        ["--listen", "0.0.0.0", "--port", "8188", "--enable-cors-header",
         "--extra-model-paths-config", "/etc/flexinfer/backend/extra_model_paths.yaml"], 8188,
    ),
    "vllm-omni-amd-ngc-no-cache": (
        "registry.harbor.lan/flexinfer/vllm-omni:rocm-gfx1100", None,
        ["--host", "0.0.0.0", "--port", "8000", "--model", "nvidia/flux-dev", "--dtype",
         "bfloat16", "--served-model-name", "omni"], 8000,
    ),
}  # fmt: skip


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_the_engine_container_is_pinned(sample: Sample) -> None:
    container = engine(sample)
    image, command, args, port = PINNED[sample.id]
    assert container["image"] == image
    assert container.get("command") == command
    assert container.get("args") == args
    assert container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    service = one(sample, "Service")
    assert service["spec"]["ports"][0]["port"] == port
    assert (
        service["spec"]["selector"] == one(sample, "Deployment")["spec"]["selector"]["matchLabels"]
    )


def test_probes_keep_the_backends_timings() -> None:
    vllm = engine(SAMPLE["vllm-nvidia-pvc-prefetch"])
    assert vllm["readinessProbe"] == {
        "httpGet": {"path": "/health", "port": 8000},
        "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 30,
    }  # fmt: skip
    assert "startupProbe" not in vllm
    comfy = engine(SAMPLE["comfyui-nvidia-configmap"])
    assert comfy["readinessProbe"]["tcpSocket"] == {"port": 8188}
    ref = engine(SAMPLE["reference-cpu-file"])
    assert ref["startupProbe"]["httpGet"] == {"path": "/readyz", "port": 8000}
    assert (ref["startupProbe"]["periodSeconds"], ref["startupProbe"]["failureThreshold"]) == (
        2,
        150,
    )


def test_gpu_models_get_the_toleration_affinity_and_resources() -> None:
    sample = SAMPLE["vllm-nvidia-pvc-prefetch"]
    spec = pod(sample)
    assert spec["tolerations"] == [
        {"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
        GPU_TOLERATION,
    ]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "flexinfer.ai/gpu.vendor", "operator": "In", "values": ["NVIDIA"]},
        {"key": "flexinfer.ai/gpu.arch", "operator": "In", "values": ["sm_89"]},
        {"key": "flexinfer.ai/gpu.count", "operator": "Gt", "values": ["1"]},
    ]
    assert spec["nodeSelector"] == {"topology.kubernetes.io/zone": "a"}
    assert engine(sample)["resources"]["limits"] == {"memory": "32Gi", "nvidia.com/gpu": "2"}
    deployment = one(sample, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    notes = deployment["spec"]["template"]["metadata"]["annotations"]
    assert notes["flexinfer.ai/gpu.vram-estimate-mb"] == "30000"
    assert engine(SAMPLE["ollama-amd-pull"])["resources"] == {"limits": {"amd.com/gpu": "1"}}


def test_engine_pods_tell_prometheus_where_their_metrics_are() -> None:
    sample = SAMPLE["vllm-nvidia-pvc-prefetch"]
    notes = one(sample, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    port = engine(sample)["ports"][0]["containerPort"]
    assert notes["prometheus.io/scrape"] == "true"
    assert notes["prometheus.io/port"] == str(port)
    assert notes["prometheus.io/path"] == "/metrics"
    # Ollama serves no metrics: nothing asks Prometheus to scrape it.
    ollama = one(SAMPLE["ollama-amd-pull"], "Deployment")["spec"]["template"]["metadata"]
    assert not any(key.startswith("prometheus.io/") for key in ollama["annotations"])


def test_reference_pods_warm_start_from_peers_through_the_registry() -> None:
    env = {e["name"]: e for e in engine(SAMPLE["reference-cpu-file"])["env"]}
    assert env["FLEXINFER_ENGINE_REGISTRY"]["value"] == "flexinfer-registry.flexinfer.svc:8001"
    assert env["FLEXINFER_ENGINE_P2P_SOURCE"]["value"] == "1"
    advertise = env["FLEXINFER_TRANSFER_SOURCE_ADVERTISE_HOST"]
    assert advertise["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_reference_pods_read_the_registry_p2p_token_from_a_secret() -> None:
    sample = SAMPLE["reference-cpu-file"]
    secret = SecretKeyRef("flexinfer-registry-p2p-token", "token")
    options = replace(sample.options(), registry_token_secret=secret)
    rendered = render_model(sample.model(), default_backends(), options)
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    kubernetes_validate.validate(deployment, K8S, strict=True)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    token = env["FLEXINFER_ENGINE_REGISTRY_TOKEN"]
    assert token == {
        "name": "FLEXINFER_ENGINE_REGISTRY_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": secret.name, "key": "token"}},
    }
    # Without the setting no token variable is rendered at all.
    assert "FLEXINFER_ENGINE_REGISTRY_TOKEN" not in {e["name"] for e in engine(sample)["env"]}


def test_the_p2p_token_secret_setting_reaches_the_render_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEXINFER_KUBERNETES_REGISTRY_P2P_TOKEN_SECRET", "p2p-token")
    options = render_options(ControllerSettings())
    assert options.registry_token_secret == SecretKeyRef("p2p-token", "token")
    monkeypatch.setenv("FLEXINFER_KUBERNETES_REGISTRY_P2P_TOKEN_SECRET", "Not A Name")
    with pytest.raises(ValidationError):
        ControllerSettings()


def test_cpu_models_get_no_gpu_scheduling() -> None:
    spec = pod(SAMPLE["reference-cpu-file"])
    assert "tolerations" not in spec
    assert "affinity" not in spec
    assert engine(SAMPLE["reference-cpu-file"])["resources"] == {}
    assert spec["enableServiceLinks"] is False


def test_the_cache_pvc_and_its_prefetch_job() -> None:
    sample = SAMPLE["vllm-nvidia-pvc-prefetch"]
    pvc = one(sample, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "qwen-7b-cache"
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "fast",
        "resources": {"requests": {"storage": "40Gi"}},
    }
    job = one(sample, "Job", "prefetch")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "flexinfer_registry.client.mx_cli"]
    args = build_parser().parse_args(container["args"])  # what the registry client accepts
    assert (args.server, args.command, args.action, args.name, args.provider) == (
        "flexinfer-registry.flexinfer.svc:8001", "model", "download",
        "Qwen/Qwen2.5-7B-Instruct", "hf",
    )  # fmt: skip
    assert (args.strategy, args.cache_dir) == ("SmartFallback", "/models")
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"] == {"claimName": "qwen-7b-cache"}
    engine_volume = pod(sample)["volumes"][0]
    assert engine_volume["persistentVolumeClaim"] == {
        "claimName": "qwen-7b-cache",
        "readOnly": True,
    }


def test_existing_and_node_caches_create_no_claim() -> None:
    mlc = objects(SAMPLE["mlc-llm-nvidia-existing-pvc"])
    assert [o["kind"] for o in mlc] == ["Service", "Deployment"]
    assert pod(SAMPLE["mlc-llm-nvidia-existing-pvc"])["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "shared-models", "readOnly": True,
    }  # fmt: skip
    local = SAMPLE["llamacpp-cpu-local"]
    host = pod(local)["volumes"][0]["hostPath"]
    assert host == {"path": "/var/lib/flexinfer/models/ml/qwen-gguf", "type": "DirectoryOrCreate"}
    assert (
        one(local, "Job", "prefetch")["spec"]["template"]["spec"]["volumes"][0]["hostPath"] == host
    )
    assert [o["kind"] for o in objects(SAMPLE["vllm-omni-amd-ngc-no-cache"])] == [
        "Service", "Deployment",
    ]  # fmt: skip


def test_the_flash_loader_copies_to_tmpfs() -> None:
    sample = SAMPLE["vllm-shared-memory-flash"]
    (init,) = pod(sample)["initContainers"]
    parsed = copy_parser(PROG).parse_args(init["command"][3:])
    assert (str(parsed.source), str(parsed.dest), parsed.name, parsed.concurrency) == (
        "/models/huggingface/meta-llama/Llama-3.1-8B-Instruct", "/dev/shm", "ml/llama-3.1-8b", 8,
    )  # fmt: skip
    volumes = {v["name"]: v for v in pod(sample)["volumes"]}
    # Memory strategy: the node's /dev/shm, so the copy outlives the pod across swaps.
    assert volumes["flash-tmpfs"]["hostPath"] == {"path": "/dev/shm", "type": "Directory"}
    mounts = {m["name"]: m["mountPath"] for m in engine(sample)["volumeMounts"]}
    assert mounts == {"model-cache": "/models", "flash-tmpfs": "/dev/shm"}
    local = {v["name"]: v for v in pod(SAMPLE["llamacpp-cpu-local"])["volumes"]}
    assert local["flash-tmpfs"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "50Gi"}


def test_the_flash_cleanup_job_runs_on_deletion_for_a_node_tmpfs() -> None:
    sample = SAMPLE["vllm-shared-memory-flash"]
    (job,) = render_cleanup(
        sample.model(), default_backends(), sample.options(), ["gpu-1"], keep=["ml/other"]
    )
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == "gpu-1"
    parsed = cleanup_parser(PROG).parse_args(spec["containers"][0]["command"][4:])
    assert (str(parsed.dest), parsed.keep) == ("/dev/shm", ["ml/other"])
    assert "ownerReferences" not in job["metadata"]  # it must outlive the Model
    other = SAMPLE["llamacpp-cpu-local"]  # an emptyDir is freed with its pod
    assert render_cleanup(other.model(), default_backends(), other.options(), ["gpu-1"]) == []


def test_a_model_that_ran_on_several_nodes_gets_a_cleanup_job_on_each() -> None:
    sample = SAMPLE["vllm-shared-memory-flash"]
    found = render_cleanup(
        sample.model(), default_backends(), sample.options(), ["gpu-2", "gpu-1", "gpu-2"]
    )
    by_node = {j["spec"]["template"]["spec"]["nodeName"]: j["metadata"]["name"] for j in found}
    assert sorted(by_node) == ["gpu-1", "gpu-2"]
    assert len(set(by_node.values())) == 2  # one name per node: neither replaces the other


def test_quantization_jobs() -> None:
    gpu = one(SAMPLE["vllm-quantize-gpu"], "Job", "quantize")
    spec = gpu["spec"]["template"]["spec"]
    assert spec["tolerations"] == [GPU_TOLERATION]
    container = spec["containers"][0]
    assert container["image"] == "registry.harbor.lan/ml/autoawq-quantizer:0.2"
    assert "command" not in container  # the Model's image runs its own entrypoint
    assert "securityContext" not in spec
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "QUANTIZE_FORMAT": "AWQ",
        "QUANTIZE_INPUT": "/models/s3/models/mistral-7b",
        "QUANTIZE_OUTPUT": "/models/s3/models/mistral-7b-awq-76f46168",
        "QUANTIZE_BITS": "4",
    }
    cpu = one(SAMPLE["diffusers-nvidia-quantize-cpu"], "Job", "quantize")["spec"]["template"]
    assert "tolerations" not in cpu["spec"]
    built_in = cpu["spec"]["containers"][0]
    assert built_in["resources"] == {}
    # FP8 is the built-in quantizer's: the controller's image runs it, as the prefetch's user.
    assert built_in["image"] == "flexinfer/controller"
    assert built_in["command"] == ["python", "-m", "flexinfer_controller.quantize"]
    assert {e["name"]: e["value"] for e in built_in["env"]} == {
        "QUANTIZE_FORMAT": "FP8",
        "QUANTIZE_INPUT": "/models/gcs/weights/sdxl-turbo",
        "QUANTIZE_OUTPUT": "/models/gcs/weights/sdxl-turbo-fp8-bd432da3",
    }
    assert cpu["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "fsGroup": 10001,
    }
    diffusers_env = {
        e["name"]: e.get("value") for e in engine(SAMPLE["diffusers-nvidia-quantize-cpu"])["env"]
    }
    assert diffusers_env["MODEL_ID"] == "/models/gcs/weights/sdxl-turbo-fp8-bd432da3"


def test_a_refusal_of_the_built_in_quantizer_fails_its_job_at_once() -> None:
    """Exit 2 (a refused request) fails the Job without retries; another image's Job keeps
    Kubernetes' retries, since its exit codes mean what that image says."""
    built_in = one(SAMPLE["diffusers-nvidia-quantize-cpu"], "Job", "quantize")["spec"]
    assert built_in["template"]["spec"]["restartPolicy"] == "Never"
    assert built_in["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "quantize", "operator": "In", "values": [2]},
        },
    ]
    own_image = one(SAMPLE["vllm-quantize-gpu"], "Job", "quantize")["spec"]
    assert "podFailurePolicy" not in own_image
    assert own_image["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_the_comfyui_config_map_points_at_the_cache() -> None:
    sample = SAMPLE["comfyui-nvidia-configmap"]
    config = one(sample, "ConfigMap")
    text = config["data"]["extra_model_paths.yaml"]
    assert "  base_path: /models/huggingface/stabilityai/sdxl-turbo\n" in text
    volumes = {v["name"]: v for v in pod(sample)["volumes"]}
    assert volumes["backend-config"]["configMap"]["name"] == config["metadata"]["name"]


def test_a_budget_only_for_two_warm_replicas() -> None:
    pdb = one(SAMPLE["vllm-nvidia-pvc-prefetch"], "PodDisruptionBudget")
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {
            "matchLabels": {"flexinfer.ai/model": "qwen-7b", "flexinfer.ai/component": "engine"}
        },
    }
    for sample in SAMPLES[2:]:
        assert "PodDisruptionBudget" not in [o["kind"] for o in objects(sample)]


def test_ollama_pulls_its_tag_before_probes_start() -> None:
    hook = engine(SAMPLE["ollama-amd-pull"])["lifecycle"]["postStart"]["exec"]["command"]
    assert hook[:2] == ["sh", "-c"]
    assert hook[3:] == ["llama3.2:3b", "llama3"]  # positional: never parsed by the shell
    assert "volumes" in pod(SAMPLE["ollama-amd-pull"])
    assert [v["name"] for v in pod(SAMPLE["ollama-amd-pull"])["volumes"]] == ["flash-tmpfs"]


def test_labels_and_owner_reference() -> None:
    for obj in objects(SAMPLE["vllm-shared-memory-flash"]):
        meta = obj["metadata"]
        assert meta["labels"]["flexinfer.ai/model"] == "llama-3.1-8b"
        assert meta["labels"]["flexinfer.ai/backend"] == "vllm"
        assert meta["labels"]["flexinfer.ai/gpu-group"] == "rtx4090-pool"
        assert meta["annotations"]["flexinfer.ai/model-key"] == "ml/llama-3.1-8b"
        assert meta["ownerReferences"] == [{
            "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model", "name": "llama-3.1-8b",
            "uid": UID, "controller": True, "blockOwnerDeletion": True,
        }]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "expected"),
    [("tiny", "tiny"), ("llama-3.1-8b", None), ("7b-chat", None), ("a" * 80, None)],
)
def test_object_names_are_dns_labels(name: str, expected: str | None) -> None:
    made = object_name(name, "cache")
    assert len(made) <= 63
    assert made[0].isalpha()
    assert made.endswith("-cache")
    assert all(c.isalnum() or c == "-" for c in made)
    if expected:
        assert made == f"{expected}-cache"
    assert object_name(name, "cache") != object_name(name + "x", "cache")


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"backend": "nope", "source": "hf://a/b"}, UnsupportedBackendError),
        ({"backend": "vllm", "source": "hf://a/b", "gpu": {"vendor": "auto"}}, InvalidSpecError),
        ({"backend": "vllm", "source": "ftp://a/b", "gpu": {"vendor": "nvidia"}}, InvalidSpecError),
        (
            {"backend": "vllm", "source": "hf://a/b", "gpu": {"vendor": "cpu"}},
            UnsupportedBackendError,
        ),
        (
            {"backend": "vllm", "source": "file:///m", "gpu": {"vendor": "nvidia"},
             "quantize": {"format": "AWQ"}},
            InvalidSpecError,
        ),
        (
            {"backend": "vllm", "source": "hf://a/b", "gpu": {"vendor": "nvidia"},
             "quantize": {"format": "INT3"}},
            InvalidSpecError,
        ),
    ],
)  # fmt: skip
def test_what_cannot_run_is_refused(spec: Obj, error: type[Exception]) -> None:
    model = Sample("bad", manifest("bad", spec)).model()
    with pytest.raises(error):
        render_model(model, default_backends(), RenderOptions())


@pytest.mark.parametrize("fmt", ["AWQ", "GPTQ", "EXL2"])
def test_calibrated_formats_need_an_image(fmt: str) -> None:
    spec = {"backend": "vllm", "source": "hf://a/b", "gpu": {"vendor": "nvidia"},
            "quantize": {"format": fmt}}  # fmt: skip
    model = Sample("bad", manifest("bad", spec)).model()
    with pytest.raises(InvalidSpecError) as caught:
        render_model(model, default_backends(), RenderOptions())
    assert caught.value.field == "spec.quantize.image"
    assert "spec.quantize.image" in str(caught.value)
    # The controller's own default image for the format is as good as the Model's.
    environ = {f"FLEXINFER_QUANTIZER_{fmt}_IMAGE": "registry.lan/ml/quantizer:1"}
    objects = render_model(model, default_backends(), RenderOptions(environ=environ))
    job = next(o for o in objects if o["metadata"]["name"].startswith("bad-quantize-"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.lan/ml/quantizer:1"
    assert "command" not in container


def test_a_gguf_quantization_points_llamacpp_at_the_file_it_writes() -> None:
    spec = {"backend": "llamacpp", "source": "hf://org/llama", "gpu": {"vendor": "cpu"},
            "cache": {"strategy": "SharedPVC"},
            "quantize": {"format": "GGUF", "type": "F16"}}  # fmt: skip
    objects = render_model(Sample("g", manifest("g", spec)).model(), default_backends(),
                           RenderOptions(replicas=1))  # fmt: skip
    job = next(o for o in objects if "-quantize-" in o["metadata"]["name"])
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["QUANTIZE_TYPE"] == "F16"
    args = quantize_parser().parse_args(container["command"][3:])  # what the quantizer accepts
    assert args.format is None  # everything comes from the variables
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    engine_args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    model_arg = engine_args[engine_args.index("--model") + 1]
    assert model_arg == env["QUANTIZE_OUTPUT"] + "/model.gguf"
