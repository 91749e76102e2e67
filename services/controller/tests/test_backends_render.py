"""Every backend's rendered engine, pinned: image per vendor/arch, command, args, env, probes."""

from __future__ import annotations

from typing import Any

import pytest

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.backends import (
    EngineSpec,
    Probe,
    RenderRequest,
    UnsupportedBackendError,
    default_backends,
)
from flexinfer_controller.backends.base import SecretKeyRef


def model(backend: str, source: str, config: dict[str, Any] | None = None, **spec: Any) -> Model:
    """A Model named ``demo`` (served as ``demo``)."""
    body = {"backend": backend, "source": source, "config": config, **spec}
    return Model.model_validate({"metadata": {"name": "demo"}, "spec": body})


def render(m: Model, location: str | None = "/models/demo", **kw: Any) -> EngineSpec:
    backend = default_backends().get(m.spec.backend)
    assert backend is not None
    kw.setdefault("vendor", "nvidia")
    return backend.render(RenderRequest(model=m, model_location=location, **kw))


def http(port: int, path: str, initial: int, period: int, timeout: int) -> Probe:
    return Probe(port, path, initial, period, timeout, failure_threshold=30)


def startup(port: int, path: str, failures: int) -> Probe:
    return Probe(port, path, 5, 2, 3, failure_threshold=failures)


def test_vllm_renders_the_operator_flags_in_order() -> None:
    config = {
        "dtype": "bfloat16", "maxModelLen": 8192, "gpuMemoryUtilization": "0.9",
        "trustRemoteCode": True, "maxNumSeqs": 16, "quantization": "awq",
        "enablePrefixCaching": False, "disableHybridKVCacheManager": True,
        "enableToolCalling": True, "reasoningParser": "deepseek_r1",
        "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
        "disabledKernels": "ExllamaLinearKernel", "unknownKey": "ignored",
    }  # fmt: skip
    spec = render(
        model("vllm", "HF://Qwen/Qwen2.5-7B-Instruct", config, kvCache={"maxBlockSize": 32})
    )
    assert spec == EngineSpec(
        backend="vllm",
        image="vllm/vllm-openai:latest",
        command=(),
        args=(
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
            "--model",
            "/models/demo",
            "--dtype",
            "bfloat16",
            "--max-model-len",
            "8192",
            "--gpu-memory-utilization",
            "0.9",
            "--trust-remote-code",
            "--max-num-seqs",
            "16",
            "--quantization",
            "awq",
            "--served-model-name",
            "demo",
            "--no-enable-prefix-caching",
            "--disable-hybrid-kv-cache-manager",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            "--reasoning-parser",
            "deepseek_r1",
            "--speculative-config",
            '{"method":"ngram","num_speculative_tokens":4}',
            "--block-size",
            "32",
        ),
        env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "VLLM_DISABLED_KERNELS": "ExllamaLinearKernel"},
        host="0.0.0.0",
        port=8000,
        served_name="demo",
        readiness=http(8000, "/health", 10, 10, 5),
        startup=None,
        startup_timeout_s=300.0,
        model_mount="/models/demo",
    )


def test_vllm_without_a_location_passes_the_hf_id_and_enables_lora_for_adapters() -> None:
    m = model("vllm", "HF://Qwen/Qwen2.5-7B-Instruct", litellm={"servedModelName": "qwen"})
    spec = render(m, location=None, lora_adapters=3, host="127.0.0.1", port=41000)
    assert spec.args == (
        "--host", "127.0.0.1", "--port", "41000", "--model", "Qwen/Qwen2.5-7B-Instruct",
        "--served-model-name", "qwen", "--enable-lora", "--max-loras", "3",
    )  # fmt: skip
    assert spec.model_mount is None
    asked = render(model("vllm", "HF://o/m", {"enableLora": True, "maxLoras": 8}))
    assert asked.args[-3:] == ("--enable-lora", "--max-loras", "8")


def test_vllm_with_lora_allows_runtime_adapter_loading_and_its_rank() -> None:
    config = {"enableLora": True, "maxLoraRank": 64}
    spec = render(model("vllm", "HF://o/m", config))
    assert spec.args[-5:] == ("--enable-lora", "--max-loras", "1", "--max-lora-rank", "64")
    # vLLM serves /v1/load_lora_adapter and /v1/unload_lora_adapter only with this set.
    assert spec.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in render(model("vllm", "HF://o/m")).env


def test_backends_declare_their_runtime_adapter_api() -> None:
    backends = default_backends()
    apis = {name: getattr(backends.get(name), "lora", None) for name in backends.names()}
    assert {name for name, api in apis.items() if api is not None} == {"reference", "vllm"}
    vllm = apis["vllm"]
    assert vllm is not None
    assert (vllm.load, vllm.unload, vllm.listing) == (
        "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/v1/models",
    )  # fmt: skip
    backend = backends.get("vllm")
    assert backend is not None
    why = backend.lora_disabled(model("vllm", "HF://o/m"))
    assert why is not None
    assert "spec.config.enableLora" in why
    assert backend.lora_disabled(model("vllm", "HF://o/m", {"maxLoras": 2})) is None
    llama = backends.get("llamacpp")
    assert llama is not None
    assert llama.lora_disabled(model("llamacpp", "HF://o/m")) is None


def test_vllm_on_amd_gets_rocm_env_and_turboquant_its_custom_backend() -> None:
    m = model("vllm", "HF://o/m", {"kvCacheCodec": "turboquant", "rocmUseAiter": False})
    spec = render(m, vendor="amd", arch="gfx1100")
    assert spec.image == "registry.harbor.lan/flexinfer/vllm:rocm-gfx1100-fa"
    assert spec.args[6:8] == ("--attention-backend", "CUSTOM")
    assert spec.env["HSA_OVERRIDE_GFX_VERSION"] == "11.0.0"
    assert spec.env["VLLM_ROCM_USE_AITER"] == "0"
    assert spec.env["VLLM_ROCM_USE_AITER_TRITON_GEMM"] == "0"
    assert spec.env["FLEXINFER_EXPERIMENTAL_KV_CACHE_CODEC"] == "turboquant"


def test_ollama_serves_with_its_env_and_pulls_the_tag() -> None:
    spec = render(model("ollama", "ollama://llama3.2:3b"), location=None)
    assert spec == EngineSpec(
        backend="ollama",
        image="ollama/ollama:latest",
        command=(),
        args=("serve",),
        env={"OLLAMA_HOST": "0.0.0.0", "OLLAMA_KEEP_ALIVE": "-1"},
        host="0.0.0.0",
        port=11434,
        served_name="demo",
        readiness=http(11434, "/", 10, 10, 5),
        startup=None,
        startup_timeout_s=60.0,
        model_mount=None,
        pull="llama3.2:3b",
    )
    local = render(model("ollama", "ollama://llama3.2:3b"), None, host="127.0.0.1", port=41000)
    assert local.env["OLLAMA_HOST"] == "127.0.0.1:41000"


def test_mlc_llm_serves_the_model_positionally_with_overrides() -> None:
    config = {"mode": "server", "modelLibPath": "/models/lib.so", "maxNumSequence": 4,
              "gpuMemoryUtilization": "0.85", "jitPolicy": "ON"}  # fmt: skip
    spec = render(model("mlc", "HF://mlc-ai/Llama-3-8B-q4f16_1-MLC", config))
    assert spec == EngineSpec(
        backend="mlc-llm",
        image="ghcr.io/mlc-ai/mlc-llm:cuda",
        command=("python", "-m", "mlc_llm"),
        args=(
            "serve",
            "/models/demo",
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
            "--mode",
            "server",
            "--model-lib",
            "/models/lib.so",
            "--overrides",
            "max_num_sequence=4;gpu_memory_utilization=0.85",
        ),
        env={"MLC_GPU_SIZE_BYTES": "24696061952", "MLC_JIT_POLICY": "ON"},
        host="0.0.0.0",
        port=8000,
        served_name="demo",
        readiness=http(8000, "/v1/models", 10, 10, 5),
        startup=None,
        startup_timeout_s=90.0,
        model_mount="/models/demo",
    )


def test_llamacpp_joins_the_gguf_file_and_maps_its_flags() -> None:
    config = {"ggufFile": "/q4.gguf", "contextSize": 8192, "threads": 8, "flashAttention": True,
              "jinja": True, "parallel": 2, "reasoningBudget": -1, "embedding": True,
              "metrics": True, "fitOff": True}  # fmt: skip
    spec = render(model("llama.cpp", "HF://o/m-GGUF", config))
    assert spec == EngineSpec(
        backend="llamacpp",
        image="ghcr.io/ggerganov/llama.cpp:server-cuda",
        command=("/opt/src/llama.cpp/build/bin/llama-server",),
        args=(
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "--model",
            "/models/demo/q4.gguf",
            "--ctx-size",
            "8192",
            "--n-gpu-layers",
            "999",
            "--threads",
            "8",
            "--flash-attn",
            "on",
            "--jinja",
            "--parallel",
            "2",
            "--reasoning-budget",
            "-1",
            "--embeddings",
            "--metrics",
            "-fit",
            "off",
        ),
        env={},
        host="0.0.0.0",
        port=8080,
        served_name="demo",
        readiness=http(8080, "/health", 10, 10, 5),
        startup=None,
        startup_timeout_s=60.0,
        model_mount="/models/demo",
    )


def test_llamacpp_on_the_cpu_offloads_nothing_and_config_port_applies() -> None:
    m = model("llamacpp", "HF://o/m", {"port": 9090, "flashAttention": True, "nGPULayers": 20})
    spec = render(m, location="/models/demo/m.gguf", vendor="cpu")
    assert spec.image == "ghcr.io/ggerganov/llama.cpp:server"
    assert spec.args == (
        "--host", "0.0.0.0", "--port", "9090", "--model", "/models/demo/m.gguf",
        "--n-gpu-layers", "0",
    )  # fmt: skip
    assert spec.readiness.port == 9090
    gpu = render(m, vendor="nvidia", host="127.0.0.1", port=41000)  # the runtime's port wins
    assert gpu.args[3] == "41000"
    assert gpu.args[6:8] == ("--n-gpu-layers", "20")


def test_diffusers_is_configured_by_env_only() -> None:
    config = {"numInferenceSteps": 4, "guidanceScale": "0.0", "useFp16": True, "nope": 1}
    spec = render(model("diffusers", "HF://stabilityai/sdxl-turbo", config))
    assert spec == EngineSpec(
        backend="diffusers",
        image="registry.harbor.lan/library/diffusers-api:cuda",
        command=(),
        args=(),
        env={
            "MODEL_ID": "/models/demo",
            "MODEL": "/models/demo",
            "PORT": "8000",
            "DEFAULT_NUM_INFERENCE_STEPS": "4",
            "DEFAULT_GUIDANCE_SCALE": "0.0",
            "USE_FP16": "true",
        },
        host="0.0.0.0",
        port=8000,
        served_name="demo",
        readiness=Probe(8000, None, 0, 5, 3, failure_threshold=3),
        startup=startup(8000, "/health", 450),
        startup_timeout_s=900.0,
        model_mount="/models/demo",
    )
    amd = render(model("diffusers", "HF://o/m"), vendor="amd", arch="gfx906")
    assert amd.env["WARMUP_RESOLUTIONS"] == "512x512"
    assert amd.env["USE_CPU_OFFLOAD"] == "0"
    assert amd.env["ENABLE_ATTENTION_SLICING"] == "1"


def test_comfyui_listens_with_cors_and_its_paths() -> None:
    config = {"modelsPath": "/models/extra.yaml", "outputDirectory": "/output"}
    spec = render(model("comfy-ui", "pvc://comfy/sdxl", config))
    assert spec == EngineSpec(
        backend="comfyui",
        image="comfyanonymous/comfyui:latest",
        command=("python", "main.py"),
        args=(
            "--listen",
            "0.0.0.0",
            "--port",
            "8188",
            "--enable-cors-header",
            "--extra-model-paths-config",
            "/models/extra.yaml",
            "--output-directory",
            "/output",
        ),
        env={"COMFYUI_OUTPUT_DIRECTORY": "/output", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
        host="0.0.0.0",
        port=8188,
        served_name="demo",
        readiness=Probe(8188, None, 10, 10, 5, failure_threshold=90),
        startup=None,
        startup_timeout_s=180.0,
        model_mount="/models/demo",
    )
    assert (
        "--enable-cors-header"
        not in render(model("comfyui", "pvc://c/s", {"enableCORS": False})).args
    )


def test_vllm_omni_renders_both_prefix_caching_forms_and_engine_version() -> None:
    m = model(
        "vllm_omni",
        "HF://Qwen/Qwen-Image",
        {"enablePrefixCaching": True, "vllmEngineVersion": "v0"},
    )
    spec = render(m, vendor="amd", arch="gfx1100")
    assert spec == EngineSpec(
        backend="vllm-omni",
        image="registry.harbor.lan/flexinfer/vllm-omni:rocm-gfx1100",
        command=(),
        args=(
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
            "--model",
            "/models/demo",
            "--served-model-name",
            "demo",
            "--enable-prefix-caching",
        ),
        env={
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
            "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1",
            "PYTORCH_ROCM_ARCH": "gfx1100",
            "VLLM_USE_V1": "0",
        },
        host="0.0.0.0",
        port=8000,
        served_name="demo",
        readiness=http(8000, "/health", 0, 5, 3),
        startup=startup(8000, "/health", 150),
        startup_timeout_s=300.0,
        model_mount="/models/demo",
    )
    off = render(model("vllm-omni", "HF://o/m", {"enablePrefixCaching": False}))
    assert off.args[-1] == "--no-prefix-caching"


def test_reference_renders_its_own_image_and_cli() -> None:
    spec = render(model("reference", "file:///models/demo"), vendor="cpu")
    assert spec == EngineSpec(
        backend="reference",
        image="flexinfer/engine:latest",
        command=("python", "-m", "flexinfer_engine", "serve"),
        args=(
            "--model-dir",
            "/models/demo",
            "--served-model-name",
            "demo",
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
        ),
        env={},
        host="0.0.0.0",
        port=8000,
        served_name="demo",
        readiness=http(8000, "/readyz", 0, 5, 3),
        startup=startup(8000, "/readyz", 150),
        startup_timeout_s=300.0,
        model_mount="/models/demo",
    )


def test_reference_gets_max_loras_for_bound_adapters() -> None:
    spec = render(model("reference", "file:///models/demo"), vendor="cpu", lora_adapters=3)
    assert spec.args[-2:] == ("--max-loras", "3")
    plain = render(model("reference", "file:///models/demo"), vendor="cpu")
    assert "--max-loras" not in plain.args


def test_reference_takes_vllms_lora_limits_from_the_config() -> None:
    config = {"maxLoras": 4, "maxLoraRank": 64}
    spec = render(model("reference", "file:///models/demo", config), vendor="cpu")
    assert spec.args[-4:] == ("--max-loras", "4", "--max-lora-rank", "64")


def test_reference_gets_every_adapter_root_and_vllm_none() -> None:
    roots = ("/srv/adapters", "/var/cache/lora-adapters")
    spec = render(model("reference", "file:///models/demo"), vendor="cpu", lora_roots=roots)
    assert spec.args[-4:] == (
        "--lora-root", "/srv/adapters", "--lora-root", "/var/cache/lora-adapters",
    )  # fmt: skip
    assert "--lora-root" not in render(model("reference", "file:///models/demo")).args
    # vLLM has no such setting: the controller's own check is the only one for it.
    vllm = render(model("vllm", "HF://o/m", {"enableLora": True}), lora_roots=roots)
    assert not any("root" in arg for arg in vllm.args)


def test_reference_with_a_registry_warm_starts_from_peers_and_serves_them() -> None:
    registry = "flexinfer-registry.flexinfer.svc:8001"
    spec = render(model("reference", "file:///models/demo"), vendor="cpu", registry=registry)
    assert spec.env == {
        "FLEXINFER_ENGINE_REGISTRY": registry,
        "FLEXINFER_ENGINE_P2P_SOURCE": "1",
    }
    # In a pod, peers reach the replica at its pod IP.
    assert spec.field_env == {"FLEXINFER_TRANSFER_SOURCE_ADVERTISE_HOST": "status.podIP"}
    plain = render(model("reference", "file:///models/demo"), vendor="cpu")
    assert (plain.env, plain.field_env) == ({}, {})
    # The local runtime's engines bind loopback: so does their WorkerService.
    local = render(
        model("reference", "file:///models/demo"), vendor="cpu", registry="127.0.0.1:8001",
        host="127.0.0.1",
    )  # fmt: skip
    assert local.env["FLEXINFER_TRANSFER_SOURCE_BIND_HOST"] == "127.0.0.1"
    assert local.env["UCX_NET_DEVICES"] == "lo"
    # The registry's P2P token: a literal only where the runtime sets the environment
    # itself (local), a Secret reference for pods; never without a registry.
    token = "p2p-token-0123456789abcdef"
    local = render(
        model("reference", "file:///models/demo"), vendor="cpu", registry="127.0.0.1:8001",
        host="127.0.0.1", registry_token=token,
    )  # fmt: skip
    assert local.env["FLEXINFER_ENGINE_REGISTRY_TOKEN"] == token
    assert local.secret_env == {}
    secret = SecretKeyRef("p2p", "token")
    pod = render(
        model("reference", "file:///models/demo"), vendor="cpu", registry=registry,
        registry_token_secret=secret,
    )  # fmt: skip
    assert pod.secret_env == {"FLEXINFER_ENGINE_REGISTRY_TOKEN": secret}
    assert "FLEXINFER_ENGINE_REGISTRY_TOKEN" not in pod.env
    alone = render(
        model("reference", "file:///models/demo"), vendor="cpu", registry_token=token,
        registry_token_secret=secret,
    )  # fmt: skip
    assert (alone.env, alone.secret_env) == ({}, {})
    request = RenderRequest(model=model("reference", "file:///m"), model_location=None,
                            registry_token=token)  # fmt: skip
    assert token not in repr(request)
    # Other engines load on their own: no registry is handed to them.
    assert (
        render(model("vllm", "HF://o/m"), registry=registry).env.get("FLEXINFER_ENGINE_REGISTRY")
        is None
    )


IMAGES = [
    # (backend, vendor, arch, environ, image)
    ("vllm", "amd", "gfx906", {}, "registry.harbor.lan/flexinfer/vllm:rocm-gfx906"),
    ("vllm", "amd", "gfx90a", {}, "rocm/vllm:latest"),
    ("vllm", "amd", "gfx1100", {"DEFAULT_VLLM_IMAGE_GFX1100": "my/vllm:rdna3"}, "my/vllm:rdna3"),
    ("vllm", "amd", "gfx90a", {"DEFAULT_VLLM_IMAGE_AMD": "my/vllm:rocm"}, "my/vllm:rocm"),
    ("vllm", None, None, {"DEFAULT_VLLM_IMAGE": "my/vllm:cuda"}, "my/vllm:cuda"),
    ("ollama", "amd", "gfx1100", {}, "ollama/ollama:rocm"),
    ("ollama", "amd", "gfx1100", {"DEFAULT_OLLAMA_IMAGE_GFX1100": "o:rdna3"}, "o:rdna3"),
    ("ollama", "amd", "gfx906", {"DEFAULT_OLLAMA_IMAGE_GFX906": "o:vega"}, "o:vega"),
    ("ollama", "intel", None, {"DEFAULT_BACKEND_IMAGE_INTEL": "o:arc"}, "o:arc"),
    ("ollama", "nvidia", "sm_52", {"DEFAULT_BACKEND_IMAGE_MAXWELL": "o:maxwell"}, "o:maxwell"),
    ("ollama", "nvidia", "sm_52", {}, "ollama/ollama:latest"),
    ("ollama", "nvidia", "sm_89", {"DEFAULT_BACKEND_IMAGE": "o:global"}, "o:global"),
    (
        "ollama",
        "nvidia",
        "sm_89",
        {"DEFAULT_BACKEND_IMAGE_NVIDIA": "o:nv", "DEFAULT_BACKEND_IMAGE": "o:g"},
        "o:nv",
    ),
    ("mlc-llm", "nvidia", "sm_52", {}, "registry.harbor.lan/flexinfer/mlc-llm:cuda-maxwell-v7"),
    ("mlc-llm", "amd", "gfx1100", {}, "ghcr.io/mlc-ai/mlc-llm:rocm"),
    ("mlc-llm", "amd", None, {"DEFAULT_MLC_LLM_IMAGE_AMD": "m:rocm"}, "m:rocm"),
    ("llamacpp", "amd", "gfx1100", {}, "ghcr.io/ggerganov/llama.cpp:server-rocm"),
    ("llamacpp", "amd", "gfx1100", {"DEFAULT_LLAMA_CPP_IMAGE_GFX1100": "l:rdna3"}, "l:rdna3"),
    ("llamacpp", "cpu", None, {"DEFAULT_LLAMA_CPP_IMAGE_CPU": "l:cpu"}, "l:cpu"),
    ("llamacpp", "nvidia", "sm_52", {"DEFAULT_LLAMA_CPP_IMAGE_MAXWELL": "l:mx"}, "l:mx"),
    ("diffusers", "amd", "gfx1100", {}, "registry.harbor.lan/library/diffusers-api:rocm-latest"),
    ("diffusers", "amd", "gfx906", {"DEFAULT_DIFFUSERS_IMAGE_GFX906": "d:vega"}, "d:vega"),
    ("comfyui", "amd", "gfx1100", {}, "registry.harbor.lan/flexinfer/comfyui:rocm-gfx1100"),
    ("comfyui", "amd", "gfx906", {}, "registry.harbor.lan/flexinfer/comfyui:rocm-gfx906"),
    ("comfyui", "amd", "gfx90a", {}, "registry.harbor.lan/library/comfyui:rocm6.2.3-v8"),
    ("vllm-omni", "amd", "gfx90a", {"DEFAULT_VLLM_OMNI_IMAGE_AMD": "vo:amd"}, "vo:amd"),
    ("vllm-omni", "nvidia", None, {"DEFAULT_VLLM_OMNI_IMAGE": "vo:cuda"}, "vo:cuda"),
    ("reference", None, None, {"DEFAULT_FLEXINFER_ENGINE_IMAGE": "me/engine:1"}, "me/engine:1"),
]


@pytest.mark.parametrize(("backend", "vendor", "arch", "environ", "image"), IMAGES)
def test_image_by_vendor_arch_and_override(
    backend: str, vendor: str | None, arch: str | None, environ: dict[str, str], image: str
) -> None:
    spec = render(model(backend, "HF://o/m"), vendor=vendor, arch=arch, environ=environ)
    assert spec.image == image


@pytest.mark.parametrize(
    ("backend", "vendor"),
    [("vllm", "cpu"), ("ollama", "cpu"), ("diffusers", "intel"), ("llamacpp", "intel")],
)
def test_a_vendor_the_backend_does_not_support_is_refused(backend: str, vendor: str) -> None:
    with pytest.raises(UnsupportedBackendError, match=f"does not support GPU vendor '{vendor}'"):
        render(model(backend, "HF://o/m"), vendor=vendor)


HOSTILE = [
    ("vllm", {"dtype": "auto\n--api-key=x"}, "line breaks"),
    ("vllm", {"tokenizer": "--trust-remote-code"}, "start with '-'"),
    ("vllm", {"servedModelName": "a\x00b"}, "NUL"),
    ("vllm", {"maxModelLen": "lots"}, "must be an integer"),
    ("vllm", {"trustRemoteCode": "yes please"}, "must be a boolean"),
    ("vllm", {"dtype": ["float16"]}, "must be a string"),
    ("llamacpp", {"ggufFile": "../../etc/passwd"}, "'..'"),
    ("llamacpp", {"chatTemplate": "-e"}, "start with '-'"),
    ("mlc-llm", {"gpuMemoryUtilization": "0.9;max_num_sequence=999"}, "';' or '='"),
    ("mlc-llm", {"mode": "--help"}, "start with '-'"),
    ("mlc-llm", {"mode": "chat"}, "must be one of"),
    ("diffusers", {"negativePrompt": "ugly\nEVIL=1"}, "line breaks"),
    ("comfyui", {"modelsPath": "-x"}, "start with '-'"),
]


@pytest.mark.parametrize(("backend", "config", "mentions"), HOSTILE)
def test_hostile_config_values_are_refused(
    backend: str, config: dict[str, Any], mentions: str
) -> None:
    with pytest.raises(InvalidSpecError, match=mentions):
        render(model(backend, "HF://o/m", config))


def test_a_value_stays_one_argument_and_env_values_may_start_with_a_dash() -> None:
    spec = render(model("vllm", "HF://o/m", {"tokenizer": "org/tok --x", "dtype": 16}))
    assert "org/tok --x" in spec.args
    assert spec.args[spec.args.index("--dtype") + 1] == "16"
    env = render(model("diffusers", "HF://o/m", {"negativePrompt": "-blurry"})).env
    assert env["DEFAULT_NEGATIVE_PROMPT"] == "-blurry"
