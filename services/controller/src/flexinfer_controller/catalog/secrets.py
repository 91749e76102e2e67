"""Where a catalog's ``secretRef`` is read: the apiserver, or a directory of mounted Secrets.

On Kubernetes the Secret is read from the apiserver (``adapters.kube.catalogs``). Locally
there is no apiserver, and the controller reads credentials from files, as it reads its
admin tokens (``AUTH_TOKEN_FILE``): ``<secrets_dir>/<namespace>/<name>/<key>``, the layout
a Secret volume mount has, so ``kubectl create secret`` material (a
``.dockerconfigjson`` file) is used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import anyio.to_thread

from flexinfer_common.errors import ConfigError, NotFoundError

MAX_SECRET_BYTES = 1 << 20  # the apiserver's own limit on a Secret
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SECRETS_DIR_SETTING = "FLEXINFER_CATALOG_SECRETS_DIR"


class SecretSource(Protocol):
    """Reads one Secret's data by namespace and name."""

    async def read(self, namespace: str, name: str) -> Mapping[str, bytes]:
        """The Secret's keys and values; NotFoundError when it does not exist."""
        ...


def check_secret_name(name: str) -> str:
    """``name`` if it is a valid Secret name (an RFC 1123 subdomain); ConfigError otherwise."""
    if len(name) > 253 or not _NAME.fullmatch(name):
        raise ConfigError(f"secretRef {name!r} is not a valid Secret name")
    return name


class DirectorySecrets:
    """Secrets as directories of files: ``<root>/<namespace>/<name>/<key>``."""

    def __init__(self, root: Path | None) -> None:
        self._root = root

    async def read(self, namespace: str, name: str) -> Mapping[str, bytes]:
        """The regular files of the Secret's directory; NotFoundError when it is absent."""
        if self._root is None:
            raise NotFoundError(
                f"secret {namespace}/{name}: no secrets directory is configured"
                f" (set {SECRETS_DIR_SETTING})"
            )
        folder = self._root / check_secret_name(namespace) / check_secret_name(name)
        return await anyio.to_thread.run_sync(_read_folder, folder, f"{namespace}/{name}")


def _read_folder(folder: Path, key: str) -> Mapping[str, bytes]:
    if not folder.is_dir():
        raise NotFoundError(f"secret {key} not found (no directory {folder})")
    data: dict[str, bytes] = {}
    try:
        for path in sorted(folder.iterdir()):
            # Mounted Secrets hold ..data symlinks next to the keys: read only plain keys.
            if path.name.startswith("..") or not path.is_file():
                continue
            if path.stat().st_size > MAX_SECRET_BYTES:
                raise ConfigError(f"secret {key}: {path.name} exceeds {MAX_SECRET_BYTES} bytes")
            data[path.name] = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"secret {key}: cannot read {folder}: {exc.strerror}") from exc
    return data
