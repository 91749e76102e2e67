"""Where an adapter's weights are for its engines: spec.source resolved to a path.

* ``LocalPath``: the URI is the path, as the engine sees it (on Kubernetes: inside the
  engine's container); it must be absolute, without ``..`` or control characters, and
  inside an adapter root (``AdapterRoots``). Its existence is the engine's to check: a
  missing directory is its 404, told in status.
* ``HuggingFace`` (``org/adapter``) and ``OCI`` (``registry/repo:tag``): fetched by the
  runtime's ``AdapterCache`` (locally: the registry, into the controller's cache dir);
  phase Caching until the files are in place.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Protocol

from flexinfer_common.api import LoRAAdapter, LoRASourceType, Model
from flexinfer_controller.core.cache import REGISTRY_NOT_CONFIGURED, CacheState, CacheStatus
from flexinfer_controller.core.lora.roots import AdapterRoots

INVALID_SOURCE = "InvalidSource"
PATH_NOT_ALLOWED = "PathNotAllowed"
LOCAL_PATH = "LocalPath"
_SCHEMES = {LoRASourceType.HUGGING_FACE: "hf", LoRASourceType.OCI: "oci"}


class AdapterCache(Protocol):
    """Fetches adapters' remote sources in the background; answers at once."""

    def ensure(self, adapter: LoRAAdapter, source: str, model: Model) -> CacheState:
        """The state of ``source`` (a registry URI: ``hf://…``, ``oci://…``) for
        ``adapter`` of base Model ``model``; starts (or keeps) its fetch. READY carries
        the engine's path."""

    async def release(self, adapter: LoRAAdapter, model: Model | None) -> None:
        """The adapter is gone: stop its fetch and remove its files (``model``: its base
        Model, None when that is gone too)."""

    async def close(self) -> None:
        """Stop every fetch."""


class NoAdapterCache:
    """No registry to fetch through: remote adapters wait, naming the setting."""

    def ensure(self, adapter: LoRAAdapter, source: str, model: Model) -> CacheState:
        """Pending, saying what would fetch it."""
        return CacheState.pending(
            REGISTRY_NOT_CONFIGURED,
            f"{adapter.spec.source.type.value} adapters are fetched through the registry, and "
            "none is configured: set FLEXINFER_CONTROLLER_REGISTRY_ADDRESS (flexinfer up "
            "does), or use a LocalPath source",
        )

    async def release(self, adapter: LoRAAdapter, model: Model | None) -> None:
        """Nothing was fetched."""

    async def close(self) -> None:
        """Nothing runs."""


def _bad(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def local_path(uri: str, roots: AdapterRoots) -> CacheState:
    """A LocalPath source as the engine's path, or why it cannot be one (checked before
    any engine is asked: outside ``roots`` the path is never handed to one)."""
    if _bad(uri):
        return CacheState.failed(INVALID_SOURCE, "spec.source.uri has control characters")
    if not uri.startswith("/"):
        return CacheState.failed(
            INVALID_SOURCE, f"a LocalPath source must be an absolute path, not {uri!r}"
        )
    if ".." in PurePosixPath(uri).parts:
        return CacheState.failed(
            INVALID_SOURCE, f"a LocalPath source must not contain '..': {uri!r}"
        )
    normal = PurePosixPath(uri)
    if (why := roots.refusal(normal)) is not None:
        return CacheState.failed(PATH_NOT_ALLOWED, why)
    path = Path(normal)
    return CacheState(CacheStatus.READY, LOCAL_PATH, f"{path}, as the engine sees it", path=path)


def resolve(
    adapter: LoRAAdapter, cache: AdapterCache, roots: AdapterRoots, model: Model
) -> CacheState:
    """Where ``adapter``'s weights are for the engines of ``model``: ready, caching, or
    failed."""
    source = adapter.spec.source
    if source.type is LoRASourceType.LOCAL_PATH:
        return local_path(source.uri, roots)
    uri = registry_source(source.type, source.uri)
    if uri is None:
        form = "org/adapter" if source.type is LoRASourceType.HUGGING_FACE else "registry/repo:tag"
        return CacheState.failed(
            INVALID_SOURCE,
            f"a {source.type.value} source.uri must look like {form}, not {source.uri!r}",
        )
    return cache.ensure(adapter, uri, model)


def registry_source(source_type: LoRASourceType, uri: str) -> str | None:
    """``org/adapter`` -> ``hf://org/adapter``, ``reg/repo:tag`` -> ``oci://reg/repo:tag``
    (a URI already carrying that scheme is kept); None for a form no registry takes."""
    scheme = _SCHEMES[source_type]
    given, sep, rest = uri.partition("://")
    if sep and given.lower() != scheme:
        return None
    body = rest if sep else uri
    if not body or _bad(body) or body.startswith("/") or ".." in body.split("/"):
        return None
    return f"{scheme}://{body}"
