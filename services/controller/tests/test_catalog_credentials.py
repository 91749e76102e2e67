"""dockerconfigjson secrets: auth, username/password, identity and registry tokens."""

from __future__ import annotations

import base64
import json

import pytest

from flexinfer_common.errors import ConfigError
from flexinfer_controller.catalog.credentials import parse_dockerconfigjson


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_entries_parse_by_normalized_host() -> None:
    doc = {
        "auths": {
            "https://Harbor.Example.com/v1/": {"auth": _b64("robot$models:s3:cret")},
            "ghcr.io": {"username": "octo", "password": "ghp_x"},
            "123456789012.dkr.ecr.eu-west-1.amazonaws.com": {"auth": _b64("AWS:eyJ0b2tlbiI6")},
            "registry.local:5000": {"identitytoken": "refresh-me"},
            "tokens.example": {"registrytoken": "bearer-me"},
        }
    }
    config = parse_dockerconfigjson(json.dumps(doc).encode())
    harbor = config.for_registry("harbor.example.com")
    assert harbor is not None
    assert harbor.basic == ("robot$models", "s3:cret")
    ghcr = config.for_registry("GHCR.io")
    assert ghcr is not None
    assert ghcr.basic == ("octo", "ghp_x")
    ecr = config.for_registry("123456789012.dkr.ecr.eu-west-1.amazonaws.com")
    assert ecr is not None
    assert ecr.basic == ("AWS", "eyJ0b2tlbiI6")
    local = config.for_registry("registry.local:5000")
    assert local is not None
    assert local.identity_token == "refresh-me"
    assert local.basic is None
    tokens = config.for_registry("tokens.example")
    assert tokens is not None
    assert tokens.registry_token == "bearer-me"
    assert config.for_registry("other.example") is None


def test_secrets_stay_out_of_repr() -> None:
    config = parse_dockerconfigjson({"auths": {"r.io": {"username": "u", "password": "hunter2"}}})
    assert "hunter2" not in repr(config)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"auths": []}', "no 'auths' object"),
        (b'{"auths": {"r.io": "x"}}', "map registry names to objects"),
        (b'{"auths": {"r.io": {"auth": "%%%hunter2"}}}', "'auth' is not base64"),
        (json.dumps({"auths": {"r.io": {"auth": _b64("nocolon")}}}).encode(), "not user:password"),
        (b'{"auths": {"r.io": {"password": 5}}}', "'password' must be a string"),
    ],
)
def test_malformed_secrets_are_config_errors_without_their_content(
    data: bytes, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_dockerconfigjson(data)
    assert message in str(caught.value)
    assert "hunter2" not in str(caught.value)
