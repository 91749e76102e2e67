"""oci:// references and registry URLs: the distribution grammar, hostile input refused."""

from __future__ import annotations

import pytest

from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.catalog.errors import InvalidReferenceError
from flexinfer_controller.catalog.reference import (
    check_manifest_reference,
    parse_reference,
    parse_registry_url,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("oci://registry.example.com/models/llama", "registry.example.com", "models/llama",
         None, None),
        ("oci://Registry.Example.com:5000/a/b/c:v1.0", "registry.example.com:5000", "a/b/c",
         "v1.0", None),
        (f"oci://r.io/m@{DIGEST}", "r.io", "m", None, DIGEST),
        (f"oci://r.io/m:v2@{DIGEST}", "r.io", "m", "v2", DIGEST),
        ("oci://[::1]:5000/x__y.z-w:latest", "[::1]:5000", "x__y.z-w", "latest", None),
        ("oci://localhost/m:_T.a-g", "localhost", "m", "_T.a-g", None),
    ],
)  # fmt: skip
def test_valid_references_parse_into_parts(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry, repository, tag, digest,
    )  # fmt: skip
    assert ref.reference == (digest or tag or "latest")
    assert parse_reference(str(ref)) == ref  # the normalized form round-trips


def test_with_digest_pins_and_keeps_the_tag() -> None:
    pinned = parse_reference("oci://r.io/models/m:v1").with_digest(DIGEST)
    assert str(pinned) == f"oci://r.io/models/m:v1@{DIGEST}"
    assert pinned.reference == DIGEST


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("https://r.io/m", "must start with oci://"),
        ("oci://r.io", "names no repository"),
        ("oci://r.io/", "names no repository"),
        ("oci://user:pw@r.io/m", "userinfo"),
        ("oci://r.io/m?x=1", "query strings"),
        ("oci://r.io/m#frag", "fragments"),
        ("oci://r.io/m%2e%2e/x", "percent-escapes"),
        ("oci://r.io/a/../b", "'..'"),
        ("oci://r.io/a//b", "empty"),
        ("oci://r.io/./b", "'.'"),
        ("oci://r.io/a\\b", "backslashes"),
        ("oci://r.io/m\n:v1", "control characters"),
        ("oci://r.io/m\x00", "control characters"),
        ("oci://r.io/m :v1", "whitespace"),
        ("oci://r.io/mödel", "non-ASCII"),
        ("oci://r.io/Models", "lowercase"),
        ("oci://r.io/-m", "lowercase"),
        ("oci://r.io/m:-v1", "tag"),
        ("oci://r.io/m:" + "v" * 129, "tag"),
        ("oci://r.io/m@sha256:abc", "digest"),
        ("oci://r.io/m@md5:" + "a" * 32, "digest"),
        (f"oci://r.io/m@{DIGEST}@{DIGEST}", "more than one '@'"),
        ("oci://r.io:99999/m", "port 99999"),
        ("oci://bad_host/m", "host[:port]"),
        ("oci://r.io/" + "a" * 300, "exceeds 255"),
    ],
)
def test_malformed_references_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(InvalidReferenceError) as caught:
        parse_reference(text)
    assert reason in str(caught.value)
    assert isinstance(caught.value, InvalidSpecError)
    assert caught.value.field == "reference"


def test_registry_urls_give_scheme_host_and_prefix() -> None:
    loc = parse_registry_url("oci://Harbor.example.com/models/")
    assert (loc.scheme, loc.registry, loc.prefix, loc.host) == (
        "https", "harbor.example.com", "models", "harbor.example.com",
    )  # fmt: skip
    plain = parse_registry_url("http://127.0.0.1:5000")
    assert (plain.base_url, plain.prefix, plain.host) == ("http://127.0.0.1:5000", "", "127.0.0.1")


@pytest.mark.parametrize(
    "url", ["ftp://r.io", "oci://r.io/m:v1", "https://u@r.io", "oci://r.io/a/../b", "oci://r.io?x"]
)
def test_bad_registry_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidReferenceError):
        parse_registry_url(url)


def test_manifest_references_are_tags_or_digests() -> None:
    assert check_manifest_reference("v1") == "v1"
    assert check_manifest_reference(DIGEST) == DIGEST
    for bad in ("../x", "sha256:zz", "a/b", ""):
        with pytest.raises(InvalidReferenceError):
            check_manifest_reference(bad)
