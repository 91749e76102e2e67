"""S3 and S3-compatible stores: ``s3://bucket/prefix`` through boto3.

The standard AWS settings apply, read from the provider's environment: AWS_ENDPOINT_URL_S3 /
AWS_ENDPOINT_URL (MinIO, Ceph, R2, moto…), AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION, AWS_PROFILE; anything unset falls through to
boto3's own chain (config files, instance roles). Each object is checked against its size and,
for single-part uploads, its ETag (the MD5 of the content); multipart ETags are not a content
hash, so those objects are verified by size only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import botocore.exceptions
from botocore.config import Config

from flexinfer_common.errors import NotFoundError
from flexinfer_registry.adapters.providers.http import md5
from flexinfer_registry.core.providers.base import (
    AccessDeniedError,
    BlockingProvider,
    DownloadResult,
    FileInfo,
    ProgressCallback,
    ProviderConfig,
    SourceUnreachableError,
)
from flexinfer_registry.core.providers.files import (
    ProgressMeter,
    check_digest,
    check_size,
    parse_bucket_url,
    remove_quietly,
    select,
    target_path,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

NOT_FOUND_CODES = frozenset({"NoSuchBucket", "NoSuchKey", "404", "NotFound"})
DENIED_CODES = frozenset(
    {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"}
)


def parse_s3_url(model_name: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix without slashes at either end)."""
    return parse_bucket_url(model_name, "s3", "S3", "a key prefix")


def translate(exc: Exception, what: str) -> Exception:
    """A botocore failure as a provider error (the caller raises it ``from exc``)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in NOT_FOUND_CODES:
            return NotFoundError(f"{what}: {code}")
        if code in DENIED_CODES:
            return AccessDeniedError(f"{what}: {code} (check the AWS credentials)")
        return SourceUnreachableError(f"{what}: {code or 'error'}")
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return AccessDeniedError(f"{what}: no AWS credentials found")
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        return SourceUnreachableError(f"{what}: {exc}")
    return exc


class S3Provider(BlockingProvider):
    """Models stored as objects under an S3 key prefix."""

    name = "s3"

    def __init__(self, config: ProviderConfig | None = None) -> None:
        self._config = config or ProviderConfig()

    def _client(self) -> S3Client:
        env = self._config.env if self._config.env is not None else os.environ
        session = boto3.session.Session(
            aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=env.get("AWS_SESSION_TOKEN"),
            region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
            profile_name=env.get("AWS_PROFILE"),
        )
        timeout = self._config.timeout_s
        config = Config(
            connect_timeout=min(timeout, 10.0),
            read_timeout=timeout,
            retries={"max_attempts": 2, "mode": "standard"},
        )
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        return session.client("s3", endpoint_url=endpoint, config=config)

    def download_blocking(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        ignore_weights: bool,
        progress: ProgressCallback | None,
    ) -> DownloadResult:
        """List the prefix, then download and verify each object."""
        bucket, prefix = parse_s3_url(model_name)
        what = f"S3 s3://{bucket}/{prefix}/"
        client = self._client()
        try:
            objects = self._list(client, bucket, prefix)
            wanted = select(
                [k for k in objects if k and not k.endswith("/")], ignore_weights=ignore_weights
            )
            if not wanted:
                raise NotFoundError(f"{what}: no objects under the prefix")
            meter = ProgressMeter(progress, sum(int(objects[k]["Size"]) for k in wanted))
            files = tuple(
                self._fetch(client, bucket, f"{prefix}/{rel}", rel, objects[rel], dest_dir, meter)
                for rel in wanted
            )
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise translate(exc, what) from exc
        finally:
            client.close()
        return DownloadResult(resolved_revision=revision, files=files)

    def _list(self, client: S3Client, bucket: str, prefix: str) -> dict[str, Any]:
        """Relative key -> listing entry, over every page."""
        found: dict[str, Any] = {}
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/"):
            for obj in page.get("Contents", []):
                found[obj["Key"][len(prefix) + 1 :]] = obj
        return found

    def _fetch(
        self,
        client: S3Client,
        bucket: str,
        key: str,
        rel: str,
        listed: Any,
        dest_dir: Path,
        meter: ProgressMeter,
    ) -> FileInfo:
        target = target_path(dest_dir, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        digest = md5()
        size = 0
        try:
            body = client.get_object(Bucket=bucket, Key=key)["Body"]
            with body, partial.open("wb") as handle:
                for block in body.iter_chunks(self._config.chunk_size):
                    handle.write(block)
                    digest.update(block)
                    size += len(block)
                    meter.add(len(block))
            etag = str(listed.get("ETag", "")).strip('"')
            check_size(rel, size, int(listed["Size"]))
            if etag and "-" not in etag:
                check_digest(rel, "ETag (MD5)", digest.hexdigest(), etag)
            partial.replace(target)
        except BaseException:
            remove_quietly(partial)
            raise
        checksum = f"etag:{etag}" if etag and "-" not in etag else "size"
        return FileInfo(path=rel, size=size, checksum=checksum)
