"""ResourceClient: what the resource commands need from a server, and a registry of backends.

``local`` talks to the controller's admin REST API (``flexinfer up``, or any controller with
the admin API); ``kubernetes`` talks to the apiserver through a kubeconfig. Both raise
``CliError`` only, so the commands never know which one they have.
"""

from __future__ import annotations

import argparse
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexinfer_cli.resources.errors import usage_error
from flexinfer_cli.resources.kinds import Kind

Obj = dict[str, Any]


@dataclass(frozen=True)
class LogOptions:
    """Which output ``logs`` shows."""

    follow: bool = False
    tail_lines: int | None = None
    replica: str | None = None
    """A replica id (local) or pod name (Kubernetes); None: the newest."""


class ResourceClient(ABC):
    """get, list, create, replace, delete and logs of the served kinds."""

    @abstractmethod
    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        """One object (CliError 404 if absent)."""

    @abstractmethod
    def list(self, kind: Kind, namespace: str | None) -> list[Obj]:
        """The objects of one namespace (None: the server's default)."""

    @abstractmethod
    def create(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        """Create ``body``; the stored object (409 if it exists)."""

    @abstractmethod
    def replace(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        """Replace the object; 409 when ``body``'s metadata.resourceVersion is stale."""

    @abstractmethod
    def delete(self, kind: Kind, namespace: str | None, name: str) -> None:
        """Delete the object (404 if absent)."""

    @abstractmethod
    def pin(self, namespace: str | None, name: str, pinned: bool) -> Obj:
        """Set (``pinned``) or remove the Model's ``flexinfer.ai/pinned`` annotation; the
        stored Model."""

    @abstractmethod
    def unload(self, namespace: str | None, name: str) -> Obj:
        """Scale the Model to zero now (``flexinfer.ai/unloaded-at``); the stored Model.
        409 when its spec keeps replicas up (minReplicas > 0 and the like)."""

    @abstractmethod
    def logs(self, namespace: str | None, model: str, options: LogOptions) -> Iterator[bytes]:
        """A replica's output of Model ``model``, as it arrives."""

    @abstractmethod
    def put_benchmark(self, namespace: str, record: Obj) -> str:
        """Store a measured throughput (``backend``, ``model``, ``deviceClass``,
        ``tokensPerSecond``) where placement reads it; a phrase saying where."""

    @abstractmethod
    def node_device_class(self, namespace: str, model: Obj) -> str | None:
        """The device class of the GPUs the Model runs on, as placement keys TPS by it;
        None when it runs on no GPU node placement knows."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""


BackendFactory = Callable[[argparse.Namespace], ResourceClient]


def _local(args: argparse.Namespace) -> ResourceClient:
    from flexinfer_cli.resources.admin import AdminClient

    return AdminClient.from_args(args)


def _kubernetes(args: argparse.Namespace) -> ResourceClient:
    from flexinfer_cli.resources.adapters.kube import KubeResourceClient

    return KubeResourceClient.from_args(args)


def backends() -> dict[str, BackendFactory]:
    """Backends by ``--runtime`` name."""
    return {"local": _local, "kubernetes": _kubernetes}


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """--runtime, --server, --token, --data-dir, --kubeconfig, --context, -n."""
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--runtime",
        choices=sorted(backends()),
        help="local: the controller's admin API (default); kubernetes: the apiserver "
        "(the default when --kubeconfig or --context is given)",
    )
    group.add_argument("--server", help="admin API URL (default $FLEXINFER_SERVER, then DATA_DIR)")
    group.add_argument("--token", help="admin token (default $FLEXINFER_ADMIN_TOKEN)")
    group.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("FLEXINFER_DATA_DIR", ".flexinfer")),
        help="the running 'flexinfer up' to find (endpoints.json, admin-token); default .flexinfer",
    )
    group.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config)")
    group.add_argument("--context", help="kubeconfig context (default: the current one)")
    group.add_argument("-n", "--namespace", help="namespace (default: the server's, or the doc's)")


def connect(args: argparse.Namespace) -> ResourceClient:
    """The backend the arguments select."""
    name = args.runtime
    if name is None:
        name = "kubernetes" if (args.kubeconfig or args.context) else "local"
    factory = backends().get(name)
    if factory is None:
        raise usage_error(f"runtime {name!r} is not one of: {', '.join(sorted(backends()))}")
    return factory(args)
