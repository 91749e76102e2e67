"""The admin API behind an admin token: nothing changes without it, and the token never leaks."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flexinfer_common.errors import ConfigError, NotFoundError
from flexinfer_common.telemetry import SD_ENGINES_PATH
from flexinfer_controller.testing import (
    Harness,
    engine_pids,
    error_of,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)

TOKEN = "ctl-" + secrets.token_hex(20)


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _refused(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer")
    error = error_of(response.text)
    assert error["type"] == "authentication_error"
    assert error["code"] == "unauthorized"


async def test_unauthenticated_calls_spawn_nothing_and_list_nothing(tmp_path: Path) -> None:
    """Issue 9: with auth on, an unauthenticated PUT spawned an engine, GET listed its URL."""
    source = fake_model_dir(tmp_path / "m").as_uri()
    doc = model_doc("tiny", source, minReplicas=1)
    async with run_controller(tmp_path, auth_token=TOKEN) as h:
        _refused(await h.client.put("/v1/admin/models/tiny", json=doc))
        _refused(await h.client.post("/v1/admin/models", json=doc))
        _refused(await h.client.put("/v1/admin/models/tiny", json=doc, headers=_bearer("x" * 40)))
        with pytest.raises(NotFoundError):
            await h.store.get_model("default", "tiny")
        assert engine_pids(tmp_path) == []

        applied = await h.client.put("/v1/admin/models/tiny", json=doc, headers=_bearer(TOKEN))
        assert applied.status_code == 201, applied.text
        event = await h.endpoints_event("default/tiny", count=1)
        url = event.endpoints[0].url
        listing = await h.client.get("/v1/admin/endpoints")
        _refused(listing)
        assert url not in listing.text
        for path in ("/v1/admin/models", "/v1/admin/models/tiny", "/v1/admin/loraadapters"):
            _refused(await h.client.get(path))
        _refused(await h.client.delete("/v1/admin/models/tiny"))
        _refused(await h.client.get("/openapi.json"))
        _refused(await h.client.get("/docs"))
        seen = await h.client.get("/v1/admin/endpoints", headers=_bearer(TOKEN))
        assert [item["url"] for item in seen.json()["items"]] == [url]
        deleted = await h.client.delete("/v1/admin/models/tiny", headers=_bearer(TOKEN))
        assert deleted.status_code == 204


async def test_probes_stay_open_and_metrics_follow_the_setting(tmp_path: Path) -> None:
    async with run_controller(tmp_path, auth_token=TOKEN) as h:
        assert (await h.client.get("/healthz")).status_code == 200
        assert (await h.client.get("/readyz")).status_code == 200
        assert (await h.client.get("/metrics")).status_code == 200
        # Prometheus's engine discovery is open exactly when /metrics is.
        assert (await h.client.get(SD_ENGINES_PATH)).json() == []
    async with run_controller(tmp_path, auth_token=TOKEN, telemetry={"metrics_auth": True}) as h:
        assert (await h.client.get("/healthz")).status_code == 200
        _refused(await h.client.get("/metrics"))
        _refused(await h.client.get(SD_ENGINES_PATH))
        scraped = await h.client.get("/metrics", headers=_bearer(TOKEN))
        assert "flexinfer_controller_replicas" in scraped.text
        discovered = await h.client.get(SD_ENGINES_PATH, headers=_bearer(TOKEN))
        assert discovered.json() == []


async def test_token_file_and_rotation(tmp_path: Path) -> None:
    new = "new-" + secrets.token_hex(20)
    path = tmp_path / "admin-token"
    path.write_text(f"{TOKEN}\n{new}\n")
    path.chmod(0o600)
    async with run_controller(tmp_path, auth_token_file=path) as h:
        for token in (TOKEN, new):
            listed = await h.client.get("/v1/admin/models", headers=_bearer(token))
            assert listed.status_code == 200
        _refused(await h.client.get("/v1/admin/models", headers=_bearer(TOKEN[:-1])))


async def test_the_token_never_appears_in_logs_metrics_or_error_bodies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    source = fake_model_dir(tmp_path / "m").as_uri()
    bodies: list[str] = []
    near_misses = [TOKEN[:-1], TOKEN + "0", TOKEN.upper(), f"{TOKEN} {TOKEN}", TOKEN[::-1]]
    async with run_controller(tmp_path, auth_token=TOKEN, telemetry={"metrics_auth": True}) as h:
        good = _bearer(TOKEN)
        # Good requests, and every error they can meet.
        ok = await h.client.put(
            "/v1/admin/models/tiny", json=model_doc("tiny", source, minReplicas=1), headers=good
        )
        assert ok.status_code == 201
        await h.endpoints_event("default/tiny", count=1)
        for response in await _error_requests(h, good):
            assert response.status_code >= 400
            bodies.append(response.text)
        # Bad credentials of every shape.
        for header in [
            *(f"Bearer {miss}" for miss in near_misses),
            f"Basic {TOKEN}",
            TOKEN,
            f"Bearer{TOKEN}",
            f"Token {TOKEN}",
        ]:
            refused = await h.client.get("/v1/admin/models", headers={"Authorization": header})
            _refused(refused)
            bodies.append(refused.text + str(refused.headers))
        metrics = (await h.client.get("/metrics", headers=good)).text
        assert (await h.client.delete("/v1/admin/models/tiny", headers=good)).status_code == 204
    captured = capfd.readouterr()
    logs = caplog.text + captured.out + captured.err
    logs += "".join(p.read_text(errors="replace") for p in (tmp_path / "data").rglob("*.log"))
    for where, text in [("logs", logs), ("/metrics", metrics), *(("body", b) for b in bodies)]:
        assert TOKEN not in text, f"the admin token leaked into {where}"
        assert TOKEN[:-1] not in text, f"a prefix of the admin token leaked into {where}"
    assert 'status="401"' in metrics, "refusals are counted"


async def _error_requests(h: Harness, good: dict[str, str]) -> list[httpx.Response]:
    """Authenticated requests that fail in every way the admin API knows."""
    yaml = {**good, "Content-Type": "application/yaml"}
    return [
        await h.client.get("/v1/admin/models/ghost", headers=good),
        await h.client.put("/v1/admin/models/tiny", content=b"a: 1\na: 2\n", headers=yaml),
        await h.client.put("/v1/admin/models/tiny", content=b"{", headers=good),
        await h.client.put("/v1/admin/models/tiny", content=b"", headers=good),
        await h.client.put("/v1/admin/models/tiny", content=b"x" * 2_000_000, headers=good),
        await h.client.put(
            "/v1/admin/models/tiny", content=b"{}", headers={**good, "Content-Type": "text/html"}
        ),
        await h.client.post("/v1/admin/models", json={"kind": "Model", "spec": {}}, headers=good),
        await h.client.get("/v1/admin/models?namespace=" + "x" * 100, headers=good),
        await h.client.patch("/v1/admin/models/tiny", headers=good),
        await h.client.get("/v1/admin/nowhere", headers=good),
    ]


def _controller_main(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``flexinfer-controller ARGS`` as its own process, which must exit by itself."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEXINFER_CONTROLLER_")}
    command = [sys.executable, "-m", "flexinfer_controller", "--data-dir", str(tmp_path), *args]
    return subprocess.run(
        command, env={**environ, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def test_main_refuses_an_open_admin_api_beyond_loopback(tmp_path: Path) -> None:
    result = _controller_main(tmp_path, "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert err.count("\n") == 0, err
    assert err.startswith("flexinfer-controller: refusing to serve an unauthenticated API")
    assert "FLEXINFER_CONTROLLER_AUTH_TOKEN" in err
    assert "FLEXINFER_CONTROLLER_ALLOW_UNAUTHENTICATED=true" in err


def test_main_reports_a_weak_token_in_one_line(tmp_path: Path) -> None:
    result = _controller_main(tmp_path, "--port", "0", FLEXINFER_CONTROLLER_AUTH_TOKEN="hunter2")
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert err.count("\n") == 0, err
    assert "hunter2" not in err
    assert "16-4096 printable ASCII" in err


async def test_create_app_refuses_too(tmp_path: Path) -> None:
    refusal = r"refusing to serve an unauthenticated API on 0\.0\.0\.0"
    with pytest.raises(ConfigError, match=refusal):
        async with run_controller(tmp_path, host="0.0.0.0"):
            pass
    async with run_controller(tmp_path, host="0.0.0.0", allow_unauthenticated=True) as h:
        assert (await h.client.get("/v1/admin/models")).status_code == 200
