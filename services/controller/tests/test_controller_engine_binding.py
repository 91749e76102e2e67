"""Engines are reachable only from this machine in the local runtime: they bind loopback.

The launch spec of every backend is read as the controller builds it; the engines that
do start (the stand-in and the real reference engine) are checked for what they listen on.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from flexinfer_common.api import Model
from flexinfer_controller.app import controller_config
from flexinfer_controller.backends import (
    LaunchContext,
    LaunchSpec,
    StaticProbe,
    UnsupportedBackendError,
    default_backends,
    launch,
)
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.testing import (
    engine_pids,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)

BIND_FLAGS = ("--host", "--listen", "--bind", "--address")
"""Flags through which the known engines take their listen address."""


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


def _model(backend: str) -> Model:
    doc = model_doc("tiny", "HF://org/tiny", backend=backend)
    doc["spec"]["gpu"] = {"vendor": "auto"}  # a vendor every backend supports
    return Model.model_validate(doc)


EVERYTHING = StaticProbe(
    executables={"vllm": "/opt/bin/vllm", "ollama": "/opt/bin/ollama"},
    modules=frozenset({"vllm", "llama_cpp", "sse_starlette"}),
)
"""A machine where every server we can run locally is installed (llama.cpp only as
llama-cpp-python, so its translated flags are read too)."""


def _ctx(tmp_path: Path, probe: StaticProbe) -> LaunchContext:
    base = controller_config(ControllerSettings(data_dir=tmp_path)).launch
    return dataclasses.replace(base, probe=probe)


def _launches(backend: str, tmp_path: Path, probe: StaticProbe) -> list[LaunchSpec]:
    """The launch as planned and as bound to two picked ports; [] when refused."""
    implementation = default_backends().get(backend)
    assert implementation is not None
    try:
        spec = launch(implementation, _model(backend), tmp_path, _ctx(tmp_path, probe))
    except UnsupportedBackendError:
        return []  # nothing is launched at all
    if spec.for_port is None:
        return [spec]
    return [spec, spec.for_port(41000), spec.for_port(41001)]


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    return ipaddress.ip_address(host).is_loopback


@pytest.mark.parametrize("backend", default_backends().names())
def test_every_local_launch_binds_loopback_or_is_refused(backend: str, tmp_path: Path) -> None:
    for spec in _launches(backend, tmp_path, EVERYTHING):
        argv = list(spec.argv)
        addresses = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in BIND_FLAGS]
        hosts = [v for k, v in spec.env.items() if k.endswith(("_HOST", "_LISTEN"))]
        assert addresses or hosts, f"{backend}: the launch names no listen address"
        for address in addresses + hosts:
            assert _is_loopback(address), (backend, address)
        assert not any(arg in ("0.0.0.0", "::", "[::]") for arg in argv), argv
        if spec.http_ready is not None:
            assert spec.http_ready.url.startswith("http://127.0.0.1:"), spec.http_ready


def test_which_backends_run_locally_depends_on_what_is_installed(tmp_path: Path) -> None:
    """If a backend becomes runnable locally, the test above starts reading its argv."""
    names = default_backends().names()
    nothing = [n for n in names if _launches(n, tmp_path, StaticProbe())]
    assert nothing == ["reference"]
    everything = [n for n in names if _launches(n, tmp_path, EVERYTHING)]
    assert everything == ["llamacpp", "ollama", "reference", "vllm"]


def _listening(pid: int) -> list[str]:
    """Addresses the process listens on (TCP)."""
    proc = psutil.Process(pid)
    return [c.laddr.ip for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]


async def test_a_started_engine_listens_on_loopback_only(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, minReplicas=1))
        event = await h.endpoints_event("default/tiny", count=1)
        assert event.endpoints[0].url.startswith("http://127.0.0.1:")
        (pid,) = engine_pids(tmp_path)
        addresses = _listening(pid)
        assert addresses, "the engine listens somewhere"
        assert all(ipaddress.ip_address(a).is_loopback for a in addresses), addresses


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    model_dir = tmp_path / "tiny"
    subprocess.run(
        [sys.executable, "-m", "flexinfer_engine", "generate", "tiny", "--out", str(model_dir),
         "--preset", "tiny"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return model_dir


@pytest.mark.slow
async def test_the_real_reference_engine_listens_on_loopback_only(
    tmp_path: Path, tiny_model: Path
) -> None:
    model_dir = tiny_model
    async with run_controller(tmp_path, engine_python=sys.executable) as h:
        await h.put_model(model_doc("tiny", model_dir.as_uri(), minReplicas=1))
        event = await h.endpoints_event("default/tiny", timeout_s=120, count=1)
        assert event.endpoints[0].url.startswith("http://127.0.0.1:")
        (pid,) = engine_pids(tmp_path)
        addresses = _listening(pid)
        assert addresses
        assert all(ipaddress.ip_address(a).is_loopback for a in addresses), addresses
        assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
