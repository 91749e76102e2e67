"""Invalid settings become one line naming the environment variable, never the value."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from flexinfer_common.bus import BusClientSettings
from flexinfer_common.settings import LogSettings, StoreSettings
from flexinfer_common.settings_errors import describe_settings_error
from flexinfer_controller.settings import ControllerSettings
from flexinfer_proxy.settings import ProxySettings
from flexinfer_registry.settings import RegistrySettings


def _error(monkeypatch: pytest.MonkeyPatch, build: type[object], env: dict[str, str]) -> str:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValidationError) as raised:
        build()
    return describe_settings_error(raised.value, env)


def test_a_validator_names_the_variable_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _error(monkeypatch, ProxySettings, {"FLEXINFER_PROXY_AUTH_TOKENS": '["sk-a","sk-b"]'})
    assert line == (
        "invalid setting FLEXINFER_PROXY_AUTH_TOKENS: "
        "token #1 has 4 characters; tokens must have 8 to 4096"
    )


def test_the_value_given_is_never_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _error(monkeypatch, ProxySettings, {"FLEXINFER_PROXY_AUTH_TOKENS": '["s3cr3t"]'})
    assert "s3cr3t" not in line


def test_a_settings_group_names_its_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bus client group is built inside the event loop, from its own environment.
    line = _error(monkeypatch, BusClientSettings, {"FLEXINFER_BUS_CONNECT_TIMEOUT_S": "soon"})
    assert line.startswith("invalid setting FLEXINFER_BUS_CONNECT_TIMEOUT_S: ")
    assert "valid number" in line
    line = _error(monkeypatch, StoreSettings, {"FLEXINFER_STORE_POOL_SIZE": "many"})
    assert line.startswith("invalid setting FLEXINFER_STORE_POOL_SIZE: ")


def test_the_seed_spelling_of_a_variable_is_named_as_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    line = _error(monkeypatch, ProxySettings, {"PROXY_MAX_QUEUE_SIZE": "-1"})
    assert line.startswith("invalid setting PROXY_MAX_QUEUE_SIZE: ")
    assert "greater than or equal to 0" in line


def test_a_nested_group_of_a_service_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _error(monkeypatch, RegistrySettings, {"FLEXINFER_REGISTRY_LIMITS_FIELD_CHARS": "3"})
    assert line.startswith("invalid setting FLEXINFER_REGISTRY_LIMITS_FIELD_CHARS: ")


def test_a_value_from_a_flag_names_the_field_and_its_variable() -> None:
    with pytest.raises(ValidationError) as raised:
        ControllerSettings(port=70000)
    line = describe_settings_error(raised.value, {})
    assert line == (
        "invalid setting port (FLEXINFER_CONTROLLER_PORT): "
        "Input should be less than or equal to 65535"
    )


def test_an_unknown_log_level_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _error(monkeypatch, LogSettings, {"FLEXINFER_LOG_LEVEL": "chatty"})
    assert line.startswith("invalid setting FLEXINFER_LOG_LEVEL: unknown log level 'chatty'")
    assert LogSettings(level="debug").level == "DEBUG"


def test_more_errors_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _error(
        monkeypatch,
        ControllerSettings,
        {"FLEXINFER_CONTROLLER_PORT": "x", "FLEXINFER_CONTROLLER_WORKERS": "y"},
    )
    assert line.endswith("(and 1 more)")
    assert line.count("\n") == 0
