"""The P2pService client stub, typed for callers (the generated one is untyped)."""

from __future__ import annotations

from typing import Any

import grpc

from flexinfer_transfer._generated import p2p_pb2_grpc

AUTH_CODES = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
"""Refusals of the caller's token: retrying cannot help until the token is fixed."""


def p2p_stub(channel: grpc.Channel) -> Any:
    """A P2pService stub on ``channel``."""
    return p2p_pb2_grpc.P2pServiceStub(channel)  # type: ignore[no-untyped-call]


def registry_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The ``authorization: Bearer <token>`` entry a registry started with tokens needs
    (the registry's P2P token); nothing without a token."""
    return (("authorization", f"Bearer {token}"),) if token else ()
