"""``flexinfer up`` never leaves the admin API open when the proxy is guarded."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from pydantic_settings import SettingsConfigDict

from flexinfer_cli.admin_token import TOKEN_FILE, embedded_admin_token
from flexinfer_common.auth import AdminAuthSettings
from flexinfer_common.errors import ConfigError

OWN = "own-admin-token-0123456789abcdef"


class Settings(AdminAuthSettings):
    model_config = SettingsConfigDict(env_prefix="FLEXINFER_TESTCTL_", extra="ignore")


def test_open_only_on_loopback_without_proxy_auth(tmp_path: Path) -> None:
    assert embedded_admin_token(tmp_path, Settings(), host="127.0.0.1", proxy_auth=False) is None
    assert not (tmp_path / TOKEN_FILE).exists()
    opted_out = Settings(allow_unauthenticated=True)
    assert embedded_admin_token(tmp_path, opted_out, host="0.0.0.0", proxy_auth=True) is None


@pytest.mark.parametrize(("host", "proxy_auth"), [("127.0.0.1", True), ("0.0.0.0", False)])
def test_generated_once_private_and_reused(tmp_path: Path, host: str, proxy_auth: bool) -> None:
    first = embedded_admin_token(tmp_path, Settings(), host=host, proxy_auth=proxy_auth)
    assert first is not None
    assert first.generated
    assert first.file == tmp_path / TOKEN_FILE
    assert stat.S_IMODE(first.file.stat().st_mode) == 0o600
    assert len(first.value) >= 32
    again = embedded_admin_token(tmp_path, Settings(), host=host, proxy_auth=proxy_auth)
    assert again is not None
    assert (again.value, again.generated) == (first.value, False)


def test_the_operators_token_wins(tmp_path: Path) -> None:
    own = embedded_admin_token(
        tmp_path, Settings(auth_token=SecretStr(OWN)), host="127.0.0.1", proxy_auth=True
    )
    assert own is not None
    assert (own.value, own.file, own.generated) == (OWN, None, False)
    path = tmp_path / "mine"
    path.write_text(f"# ours\n{OWN}\n")
    path.chmod(0o600)
    from_file = embedded_admin_token(
        tmp_path, Settings(auth_token_file=path), host="127.0.0.1", proxy_auth=True
    )
    assert from_file is not None
    assert (from_file.value, from_file.file) == (OWN, path)
    assert not (tmp_path / TOKEN_FILE).exists()


def test_a_shared_or_linked_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / TOKEN_FILE
    path.write_text(OWN + "\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by other users"):
        embedded_admin_token(tmp_path, Settings(), host="127.0.0.1", proxy_auth=True)
    path.unlink()
    (tmp_path / "elsewhere").write_text(OWN + "\n")
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(ConfigError, match="regular file"):
        embedded_admin_token(tmp_path, Settings(), host="127.0.0.1", proxy_auth=True)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_up_with_proxy_auth_guards_the_admin_api(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEXINFER_")}
    env["FLEXINFER_PROXY_AUTH_TOKENS"] = json.dumps(["sk-client-0123456789"])
    log = (tmp_path / "up.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "flexinfer_cli", "up", "--data-dir", str(data_dir), "--port", "0"],
        env=env, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    log.close()
    try:
        urls = _wait_for_endpoints(data_dir / "endpoints.json", proc)
        token_file = data_dir / TOKEN_FILE
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        admin = f"{urls['controller']}/v1/admin/models"
        refused = httpx.get(admin, timeout=10)
        assert refused.status_code == 401
        client = {"Authorization": "Bearer sk-client-0123456789"}
        assert httpx.get(admin, headers=client, timeout=10).status_code == 401
        listed = httpx.get(admin, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert [m["metadata"]["name"] for m in listed.json()["items"]] == ["tiny"], "the demo"
        assert httpx.get(f"{urls['controller']}/healthz", timeout=10).status_code == 200
        registry = f"{urls['registry_http']}/v1/registry/models"
        assert httpx.get(registry, timeout=10).status_code == 401
        guarded = httpx.get(registry, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert guarded.status_code == 200
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    banner = out.decode()
    assert f'-H "Authorization: Bearer $(cat {data_dir / TOKEN_FILE})"' in banner
    logged = (tmp_path / "up.log").read_text()
    assert f"token generated in {data_dir / TOKEN_FILE}" in logged
    assert token not in banner + logged


def _wait_for_endpoints(path: Path, proc: subprocess.Popen[bytes]) -> dict[str, str]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if path.exists():
            urls: dict[str, str] = json.loads(path.read_text())
            return urls
        if proc.poll() is not None:
            raise AssertionError(f"flexinfer up exited with {proc.returncode}")
        time.sleep(0.05)
    raise AssertionError("flexinfer up did not become ready")
