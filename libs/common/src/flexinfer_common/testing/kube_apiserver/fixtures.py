"""pytest fixtures for the fake apiserver (the only module of the package importing pytest)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from flexinfer_common.testing.kube_apiserver.server import KubeApiServer


def kube_apiserver_fixture(
    crds: Sequence[Path] = (), *, history_limit: int = 1000
) -> Callable[[], Iterator[KubeApiServer]]:
    """A function-scoped fixture yielding a started ``KubeApiServer`` serving ``crds``.

    Assign it in a test module: ``kube_apiserver = kube_apiserver_fixture([crd_dir])``.
    """

    @pytest.fixture
    def kube_apiserver() -> Iterator[KubeApiServer]:
        """A fake apiserver on a free loopback port, stopped after the test."""
        with KubeApiServer(crds, history_limit=history_limit) as server:
            yield server

    return kube_apiserver
