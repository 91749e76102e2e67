"""``flexinfer up`` wires its embedded registry's gRPC address into the controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexinfer_cli.stack import EmbeddedStack

PORTS = {"proxy": 0, "controller": 0, "scheduler": 0, "registry_http": 0, "registry_grpc": 18001}


def test_controller_dials_the_embedded_registry(tmp_path: Path) -> None:
    settings = EmbeddedStack(tmp_path, "0.0.0.0", dict(PORTS)).configure()
    registry = settings.controller.registry
    assert registry.address == "127.0.0.1:18001"  # the wildcard listen address on loopback
    # Off loopback the stack is guarded: the controller sends the registry's token.
    assert registry.auth_token is not None
    assert settings.registry.auth_token is not None
    assert registry.auth_token.get_secret_value() == settings.registry.auth_token.get_secret_value()
    # Its engines get a P2P token of their own, generated per start, never the admin one.
    assert settings.registry.p2p_token is not None
    assert registry.p2p_token is not None
    p2p = registry.p2p_token.get_secret_value()
    assert p2p == settings.registry.p2p_token.get_secret_value()
    assert p2p != registry.auth_token.get_secret_value()
    again = EmbeddedStack(tmp_path, "0.0.0.0", dict(PORTS)).configure()
    assert again.controller.registry.p2p_token is not None
    assert again.controller.registry.p2p_token.get_secret_value() != p2p


def test_an_open_embedded_registry_needs_no_p2p_token(tmp_path: Path) -> None:
    settings = EmbeddedStack(tmp_path, "127.0.0.1", dict(PORTS)).configure()
    assert settings.registry.auth_token is None
    assert settings.registry.p2p_token is None
    assert settings.controller.registry.p2p_token is None


def test_the_controllers_own_registry_setting_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_CONTROLLER_REGISTRY_ADDRESS", "registry.example:8001")
    settings = EmbeddedStack(tmp_path, "127.0.0.1", dict(PORTS)).configure()
    assert settings.controller.registry.address == "registry.example:8001"
