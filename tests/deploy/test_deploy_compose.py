"""compose.yaml, Prometheus and Grafana provisioning: schema and cross-reference checks.

There is no Docker engine here: compose.yaml is validated against the Compose
Specification's JSON schema (vendored in tests/deploy/fixtures, nothing is downloaded),
and what a schema cannot see is checked by reading the files compose.yaml names.
test_deploy_topology.py starts the same topology as processes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from flexinfer_testing.dockerfiles import instructions, stages
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
SCHEMA = Path(__file__).parent / "fixtures" / "compose-spec.json"
FLEXINFER = ("proxy", "controller", "scheduler", "registry", "agent")
ONE_SHOTS = ("models", "model-pool")
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?[?-][^}]*)?\}")
SECRET_KEY = re.compile(r"TOKEN|PASSWORD|SECRET|_KEY$")


def _compose() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return compose


def _services() -> dict[str, Any]:
    services: dict[str, Any] = _compose()["services"]
    return services


def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


def test_compose_matches_the_compose_specification() -> None:
    _validator().validate(_compose())


def test_the_schema_check_can_fail() -> None:
    broken = _compose()
    broken["services"]["proxy"]["depends_on"]["controller"]["condition"] = "service_up"
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(broken)


def test_the_topology() -> None:
    assert set(_services()) == {
        "redis", "postgres", *FLEXINFER, *ONE_SHOTS, "prometheus", "grafana",
    }  # fmt: skip


def test_images_are_pinned_and_builds_use_their_own_dockerfile() -> None:
    for name, svc in _services().items():
        assert ("image" in svc) != ("build" in svc), f"{name}: exactly one of image and build"
        if "image" in svc:
            assert re.search(r":v?\d+(\.\d+)+", svc["image"]), f"{name}: pin the image tag"
            continue
        build = svc["build"]
        assert (ROOT / build["context"]).resolve() == ROOT, f"{name}: context is the repo root"
        dockerfile = ROOT / build["dockerfile"]
        assert dockerfile.is_file(), name
        if "target" in build:
            assert build["target"] in stages(dockerfile), f"{name}: no stage {build['target']}"
    for name in FLEXINFER:
        expected = f"services/{name}/Dockerfile"
        assert _services()[name]["build"]["dockerfile"] == expected, name
    assert _services()["models"]["build"]["dockerfile"] == "services/engine/Dockerfile"


def _has_healthcheck(svc: dict[str, Any]) -> bool:
    if "healthcheck" in svc:
        return not svc["healthcheck"].get("disable", False)
    if "build" in svc:
        return any(w == "HEALTHCHECK" for w, _ in instructions(ROOT / svc["build"]["dockerfile"]))
    return False


def test_long_running_services_are_health_checked_and_waited_for() -> None:
    services = _services()
    for name, svc in services.items():
        if name in ONE_SHOTS:
            assert svc["restart"] == "no", name
        else:
            assert _has_healthcheck(svc), f"{name} has no healthcheck"
        depends = svc.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
        for dep, how in depends.items():
            wanted = "service_completed_successfully" if dep in ONE_SHOTS else "service_healthy"
            assert how["condition"] == wanted, f"{name} -> {dep}"
    for name in FLEXINFER:
        assert {"redis", "postgres"} <= set(services[name]["depends_on"]), name
    assert "models" in services["controller"]["depends_on"]


def test_no_secret_is_in_the_file() -> None:
    text = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    template = (ROOT / ".env.example").read_text(encoding="utf-8")
    declared = set(re.findall(r"^(\w+)=$", template, re.MULTILINE))
    used = {m.group(1) for m in INTERPOLATION.finditer(text)}
    assert used == declared, "compose.yaml's ${VARS} and .env.example's keys differ"
    for name, svc in _services().items():
        for key, value in svc.get("environment", {}).items():
            if SECRET_KEY.search(key):
                assert INTERPOLATION.fullmatch(str(value)), f"{name}: {key} is written out"
            userinfo = re.search(r"://[^/@:]*:(\$\{[^}]*\}|[^/@]*)@", str(value))
            if userinfo:
                assert INTERPOLATION.fullmatch(userinfo.group(1)), f"{name}: {key} has a password"
    for ignore in (".gitignore", ".dockerignore"):
        assert ".env" in (ROOT / ignore).read_text().split(), f"{ignore} lets .env through"


def test_volumes_and_network_namespaces_resolve() -> None:
    compose = _compose()
    services: dict[str, Any] = compose["services"]
    mounts: dict[str, dict[str, str]] = {}
    for name, svc in services.items():
        mode = svc.get("network_mode", "")
        if mode:
            owner = mode.removeprefix("service:")
            assert owner in services, name
            assert "ports" not in svc, f"{name}: publish its ports on {owner}"
            assert owner in svc["depends_on"], f"{name} needs {owner} up first"
        for volume in svc.get("volumes", []):
            source, _target, *mode_ = volume.split(":")
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source} is missing"
            else:
                assert source in compose["volumes"], f"{name}: volume {source} undeclared"
            mounts.setdefault(source, {})[name] = mode_[0] if mode_ else "rw"
    # The model cache: written once by the generator, read by whoever loads weights, and
    # mounted first by the generator (a fresh volume takes the first mount point's owner).
    assert mounts["model-cache"] == {"models": "rw", "controller": "ro", "registry": "ro"}
    for reader in ("controller", "registry"):
        assert "models" in services[reader]["depends_on"], f"{reader} may mount it first"
    published = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(published) == len(set(published)), f"published ports collide: {published}"


def test_the_engine_pool_is_what_the_generator_writes() -> None:
    services = _services()
    command = services["models"]["command"]
    out = Path(command[command.index("--out") + 1])
    pool = ROOT / "deploy/compose/models"
    (manifest,) = [yaml.safe_load(p.read_text()) for p in pool.glob("*.yaml")]
    assert manifest["spec"]["backend"] == "reference"
    assert manifest["spec"]["source"] == out.as_uri()
    bound = {v.split(":")[1]: v.split(":")[0] for v in services["model-pool"]["volumes"]}
    applied = services["model-pool"]["command"]
    assert (ROOT / bound[applied[applied.index("-f") + 1]]).resolve() == pool


# ---------------------------------------------------------------------------- Prometheus


def _prometheus() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        (ROOT / "deploy/prometheus/prometheus.yml").read_text(encoding="utf-8")
    )
    return config


def _address(service: str) -> str:
    """The compose host name that reaches SERVICE (itself, or whose network it joined)."""
    mode = _services()[service].get("network_mode", "")
    return mode.removeprefix("service:") or service


def _listen_port(service: str) -> int:
    env = _services()[service]["environment"]
    return int(env[f"FLEXINFER_{service.upper()}_PORT"])


def test_prometheus_scrapes_every_service_and_discovers_engines() -> None:
    jobs = {job["job_name"]: job for job in _prometheus()["scrape_configs"]}
    assert set(jobs) == {*FLEXINFER, "engines"}
    for service in FLEXINFER:
        (target,) = jobs[service]["static_configs"][0]["targets"]
        assert target == f"{_address(service)}:{_listen_port(service)}", service
    (sd,) = jobs["engines"]["http_sd_configs"]
    # docs/observability.md, "Engine discovery for Prometheus": the controller's route.
    assert (
        sd["url"] == f"http://{_address('controller')}:{_listen_port('controller')}/v1/sd/engines"
    )
    # Engines listen on the controller's loopback, so Prometheus must share that network.
    assert _address("prometheus") == _address("controller")


def test_promtool_accepts_the_configuration() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package has it)")
    config = ROOT / "deploy/prometheus/prometheus.yml"
    result = subprocess.run(
        [promtool, "check", "config", "--syntax-only", str(config)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------- Grafana


def test_grafana_is_provisioned_from_deploy_grafana() -> None:
    grafana = _services()["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load(
        (provisioning / "datasources/prometheus.yaml").read_text(encoding="utf-8")
    )["datasources"]
    assert datasource["url"] == f"http://{_address('prometheus')}:9090"
    assert "9090:9090" in _services()[_address("prometheus")]["ports"]
    (provider,) = yaml.safe_load(
        (provisioning / "dashboards/flexinfer.yaml").read_text(encoding="utf-8")
    )["providers"]
    dashboards = ROOT / mounts[provider["options"]["path"]]
    assert sorted(dashboards.glob("*.json")), "no dashboard to provision"
    home = Path(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert (dashboards / home.relative_to(provider["options"]["path"])).is_file()
    for path in dashboards.glob("*.json"):
        for panel in json.loads(path.read_text(encoding="utf-8")).get("panels", []):
            for target in panel.get("targets", []):
                uid = (target.get("datasource") or panel.get("datasource") or {}).get("uid")
                assert uid in (None, datasource["uid"], "${datasource}"), f"{path.name}: {uid}"
