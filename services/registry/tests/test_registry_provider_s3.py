"""The S3 provider against moto's S3 server, through boto3 and the standard AWS settings."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from flexinfer_common.errors import InvalidSpecError, NotFoundError
from flexinfer_registry.adapters.providers.s3 import S3Provider
from flexinfer_registry.core.providers.base import (
    AccessDeniedError,
    ChecksumMismatchError,
    ProviderConfig,
    SourceUnreachableError,
    UnsafePathError,
)

FILES = {
    "models/m/config.json": b'{"a": 1}',
    "models/m/model.safetensors": b"w" * 5000,
    "models/m/tok/vocab.txt": b"v",
    "models/other/x.json": b"x",
}


def s3_client(env: dict[str, str]) -> Any:
    """A boto3 S3 client of the moto server that ``env`` points at."""
    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
    client = s3_client(env)
    client.create_bucket(Bucket="bucket")
    for key, data in FILES.items():
        client.put_object(Bucket="bucket", Key=key, Body=data)
    client.close()
    try:
        yield env
    finally:
        server.stop()


def provider(env: dict[str, str]) -> S3Provider:
    return S3Provider(ProviderConfig(env=env, timeout_s=5.0))


async def test_s3_downloads_and_verifies_etag(s3_env: dict[str, str], tmp_path: Path) -> None:
    seen: list[int] = []
    result = await provider(s3_env).download(
        "s3://bucket/models/m", None, tmp_path, progress=lambda d, t: seen.append(d)
    )
    assert [f.path for f in result.files] == ["config.json", "model.safetensors", "tok/vocab.txt"]
    assert all(f.checksum.startswith("etag:") for f in result.files)
    assert (tmp_path / "model.safetensors").read_bytes() == b"w" * 5000
    assert seen[-1] == 5000 + 8 + 1
    assert not (tmp_path / "model.safetensors.part").exists()


async def test_s3_endpoint_from_service_specific_variable(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**s3_env, "AWS_ENDPOINT_URL_S3": s3_env["AWS_ENDPOINT_URL"]}
    env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # the S3-specific setting wins
    result = await provider(env).download("s3://bucket/models/m", None, tmp_path)
    assert len(result.files) == 3


async def test_s3_ignore_weights(s3_env: dict[str, str], tmp_path: Path) -> None:
    result = await provider(s3_env).download(
        "s3://bucket/models/m", None, tmp_path, ignore_weights=True
    )
    assert [f.path for f in result.files] == ["config.json", "tok/vocab.txt"]


async def test_s3_not_found(s3_env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="NoSuchBucket"):
        await provider(s3_env).download("s3://nobucket/models/m", None, tmp_path)
    with pytest.raises(NotFoundError, match="no objects"):
        await provider(s3_env).download("s3://bucket/models/none", None, tmp_path)


async def test_s3_bad_names(s3_env: dict[str, str], tmp_path: Path) -> None:
    for name in ("s3://bucket", "s3://bucket/../x", "bucket/prefix"):
        with pytest.raises(InvalidSpecError):
            await provider(s3_env).download(name, None, tmp_path)


async def test_s3_etag_mismatch(
    s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The object changes between listing and download: the ETag from the listing no longer
    # matches the bytes received, which is exactly what verification must catch.
    client = s3_client(s3_env)
    original = S3Provider._list

    def list_then_change(self: S3Provider, c: object, bucket: str, prefix: str) -> object:
        listing = original(self, c, bucket, prefix)  # type: ignore[arg-type]
        client.put_object(Bucket=bucket, Key=f"{prefix}/config.json", Body=b'{"a": 2}')
        return listing

    monkeypatch.setattr(S3Provider, "_list", list_then_change)
    try:
        with pytest.raises(ChecksumMismatchError, match="ETag"):
            await provider(s3_env).download("s3://bucket/models/m", None, tmp_path)
        assert not (tmp_path / "config.json").exists()
    finally:
        client.put_object(Bucket="bucket", Key="models/m/config.json", Body=b'{"a": 1}')
        client.close()


async def test_s3_traversal_rejected(s3_env: dict[str, str], tmp_path: Path) -> None:
    client = s3_client(s3_env)
    client.put_object(Bucket="bucket", Key="evil/m/../../../escape", Body=b"x")
    client.close()
    with pytest.raises(UnsafePathError):
        await provider(s3_env).download("s3://bucket/evil/m", None, tmp_path / "d")
    assert not (tmp_path / "d").exists()


async def test_s3_unreachable_is_quick(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_REGION": "us-east-1",
    }
    started = time.monotonic()
    with pytest.raises(SourceUnreachableError, match="Could not connect"):
        await provider(env).download("s3://bucket/models/m", None, tmp_path)
    assert time.monotonic() - started < 10


async def test_s3_missing_credentials_is_denied(
    s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No keys in the provider's env, and nothing for boto3's fallback chain to find either.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    env = {"AWS_ENDPOINT_URL": s3_env["AWS_ENDPOINT_URL"], "AWS_REGION": "us-east-1"}
    with pytest.raises(AccessDeniedError, match="credentials"):
        await provider(env).download("s3://bucket/models/m", None, tmp_path / "d")
