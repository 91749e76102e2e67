"""compose.yaml's topology, started as processes, serves the openai SDK.

There is no Docker engine here, so the FlexInfer services of compose.yaml run as local
processes (flexinfer_testing.compose_processes: the same commands, environment, start order
and healthchecks), sharing the machine's Redis and PostgreSQL as they share compose's. The
distributed mode of tests/e2e starts a controller and a proxy; this adds the registry, the
scheduler, the agent, the model generator and the engine pool's one-shot apply, as compose
wires them.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from flexinfer_testing.compose_processes import ComposeProcesses
from flexinfer_testing.services import postgres_database, require_redis
from flexinfer_testing.stack import delete_redis_keys

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]
HEALTHY_TIMEOUT_S = 90.0
ONE_SHOT_TIMEOUT_S = 120.0


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[ComposeProcesses]:
    """Every FlexInfer service of compose.yaml running, in depends_on order."""
    redis_url = require_redis()
    prefix = f"deploy-{uuid.uuid4().hex[:8]}:"
    with postgres_database("flexinfer_deploy") as database:
        procs = ComposeProcesses(
            root=tmp_path,
            secrets={
                "FLEXINFER_ADMIN_TOKEN": secrets.token_hex(24),
                "FLEXINFER_REGISTRY_P2P_TOKEN": secrets.token_hex(24),
                "POSTGRES_PASSWORD": secrets.token_hex(24),
                "GRAFANA_ADMIN_PASSWORD": secrets.token_hex(24),
            },
            overrides={
                "FLEXINFER_BUS_URL": redis_url,
                "FLEXINFER_BUS_STREAM_PREFIX": prefix,
                "FLEXINFER_STORE_URL": database,
                # A test must leave no engine behind when it stops the controller.
                "FLEXINFER_CONTROLLER_STOP_ENGINES_ON_SHUTDOWN": "true",
            },
        )
        try:
            procs.up(HEALTHY_TIMEOUT_S, ONE_SHOT_TIMEOUT_S)
            yield procs
        finally:
            engines = _engines(procs)
            procs.stop()
            delete_redis_keys(redis_url, prefix)
            survivors = [e.pid for e in engines if e.is_running() and e.status() != "zombie"]
            assert not survivors, f"engines {survivors} outlived the controller"


def _engines(procs: ComposeProcesses) -> list[psutil.Process]:
    controller = procs.procs.get("controller")
    if controller is None or controller.poll() is not None:
        return []
    return psutil.Process(controller.pid).children(recursive=True)


def _url(procs: ComposeProcesses, service: str, port: int) -> str:
    return f"http://127.0.0.1:{procs.port(service, port)}"


def test_the_openai_sdk_is_served_through_the_compose_topology(
    topology: ComposeProcesses,
) -> None:
    proxy = _url(topology, "controller", 8080)  # the proxy is on the controller's network
    with openai.OpenAI(base_url=f"{proxy}/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
        assert "tiny" in [m.id for m in sdk.models.list().data]
        # The pool is scaled to zero: this request cold-starts an engine in the controller.
        reply = sdk.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=8
        )
        assert reply.choices[0].message.content
        stream = sdk.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Again"}], max_tokens=8, stream=True
        )
        chunks = [c.choices[0].delta.content or "" for c in stream if c.choices]
        assert "".join(chunks)
    assert _engines(topology), "the engine runs as the controller's subprocess"


def test_every_scrape_target_serves_metrics(topology: ComposeProcesses) -> None:
    # The targets of deploy/prometheus/prometheus.yml, as compose's network resolves them.
    targets = {
        "proxy": _url(topology, "controller", 8080),
        "controller": _url(topology, "controller", 8090),
        "scheduler": _url(topology, "scheduler", 8888),
        "registry": _url(topology, "registry", 8011),
        "agent": _url(topology, "agent", 9100),
    }
    for job, url in targets.items():
        response = httpx.get(f"{url}/metrics", timeout=10)
        assert response.status_code == 200, job
        assert "# TYPE" in response.text, job


def test_the_admin_apis_need_the_token_from_env(topology: ComposeProcesses) -> None:
    token = topology.secrets["FLEXINFER_ADMIN_TOKEN"]
    models = f"{_url(topology, 'controller', 8090)}/v1/admin/models"
    assert httpx.get(models, timeout=10).status_code == 401
    response = httpx.get(models, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 200
    assert "tiny" in response.text  # applied by the model-pool one-shot


def test_prometheus_finds_the_engines_through_the_controller(topology: ComposeProcesses) -> None:
    proxy = _url(topology, "controller", 8080)
    with openai.OpenAI(base_url=f"{proxy}/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
        sdk.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
    # deploy/prometheus/prometheus.yml's engines job, from compose's Prometheus, which is on
    # the controller's network: the URL is the same here.
    url = f"{_url(topology, 'controller', 8090)}/v1/sd/engines"
    token = {"Authorization": f"Bearer {topology.secrets['FLEXINFER_ADMIN_TOKEN']}"}
    if httpx.get(url, headers=token, timeout=10).status_code == 404:
        pytest.skip("this controller has no /v1/sd/engines yet (docs/observability.md)")
    sd = httpx.get(url, timeout=10)  # compose's Prometheus sends no token
    assert sd.status_code == 200, sd.text
    (group,) = sd.json()
    assert group["labels"]["model"].endswith("tiny")
    (target,) = group["targets"]
    metrics = httpx.get(f"http://{target}{group['labels']['__metrics_path__']}", timeout=10)
    assert metrics.status_code == 200
    assert "# TYPE" in metrics.text
