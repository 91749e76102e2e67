"""Model documents from untrusted bodies: duplicate keys, non-finite numbers, hostile shapes."""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from flexinfer_controller.core.documents import (
    MAX_DEPTH,
    MAX_NODES,
    DuplicateKeyError,
    MalformedDocumentError,
    decode,
)
from flexinfer_controller.testing import Harness, error_of, run_controller

MODEL_YAML = """\
apiVersion: ai.flexinfer/v1alpha2
kind: Model
metadata:
  name: tiny
  labels:
    team: ml
spec:
  backend: vllm
  source: HF://org/tiny
  litellm:
    aliases: [a, b]
  serverless:
    idleTimeout: 5m
"""

# (the line the duplicate follows, the duplicate, its key, the path the error names)
YAML_DUPLICATES = [
    ("kind: Model\n", "kind: Model\n", "kind", "kind"),
    ("  name: tiny\n", "  name: other\n", "name", "metadata.name"),
    ("    team: ml\n", "    team: ai\n", "team", "metadata.labels.team"),
    ("  backend: vllm\n", "  backend: vllm\n", "backend", "spec.backend"),
    (
        "    idleTimeout: 5m\n",
        "    idleTimeout: 1m\n",
        "idleTimeout",
        "spec.serverless.idleTimeout",
    ),
]


def _yaml_with(extra: str, after: str) -> tuple[bytes, int]:
    """MODEL_YAML with ``extra`` inserted after the line ``after``; and ``extra``'s line."""
    head, sep, tail = MODEL_YAML.partition(after)
    assert sep, after
    return (head + sep + extra + tail).encode(), (head + sep).count("\n") + 1


@pytest.mark.parametrize(("after", "extra", "key", "path"), YAML_DUPLICATES)
def test_yaml_duplicate_keys_are_refused_at_every_level(
    after: str, extra: str, key: str, path: str
) -> None:
    body, line = _yaml_with(extra, after)
    with pytest.raises(DuplicateKeyError) as caught:
        decode(body, "yaml")
    message = str(caught.value)
    assert f"duplicate key {key!r}" in message
    assert f"(line {line}; first at line " in message
    assert caught.value.path == path


def test_yaml_duplicates_inside_lists_and_flow_mappings() -> None:
    body = b"spec:\n  items:\n    - {a: 1, b: 2}\n    - {a: 1, a: 3}\n"
    with pytest.raises(DuplicateKeyError) as caught:
        decode(body, "yaml")
    assert caught.value.path == "spec.items[1].a"
    assert "line 4" in str(caught.value)


def test_yaml_keys_that_collide_once_built_are_duplicates() -> None:
    # 0x10 and 16 are one int; "16" stays a different (string) key.
    with pytest.raises(DuplicateKeyError, match="duplicate key 16"):
        decode(b"a:\n  0x10: x\n  16: y\n", "yaml")
    assert decode(b'a:\n  16: x\n  "16": y\n', "yaml") == {"a": {16: "x", "16": "y"}}


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ('{"kind": "Model", "kind": "Model"}', "kind"),
        ('{"metadata": {"name": "a", "name": "b"}}', "metadata.name"),
        ('{"spec": {"litellm": {"aliases": [{"x": 1, "x": 2}]}}}', "spec.litellm.aliases[0].x"),
        ('{"metadata": {"labels": {"a.b/c": "1", "a.b/c": "2"}}}', "metadata.labels['a.b/c']"),
    ],
)
def test_json_duplicate_keys_are_refused_at_every_level(body: str, path: str) -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        decode(body.encode(), "json")
    assert caught.value.path == path
    assert "duplicate key" in str(caught.value)


@pytest.mark.parametrize(
    ("body", "fmt", "message"),
    [
        (b'{"a": NaN}', "json", "NaN is not a valid JSON number"),
        (b'{"a": -Infinity}', "json", "-Infinity is not a valid JSON number"),
        (b'{"a": {"b": [1e999]}}', "json", "inf at a.b[0] is not a finite number"),
        (b"a: .nan\n", "yaml", "nan at a is not a finite number"),
        (b"a: [-.inf]\n", "yaml", "-inf at a[0] is not a finite number"),
        (b"a: &x 1\nb: *x\n", "yaml", "aliases"),
        (b"<<: {a: 1}\n", "yaml", "merge keys"),
        (b"? [a, b]\n: 1\n", "yaml", "mapping keys must be scalars"),
        (b"a: " + b"[" * 200 + b"]" * 200, "yaml", f"deeper than {MAX_DEPTH} levels"),
        (b'{"a": ' + b"[" * 200 + b"]" * 200 + b"}", "json", f"deeper than {MAX_DEPTH} levels"),
        (b"a: [" + b"0," * MAX_NODES + b"0]", "yaml", f"more than {MAX_NODES} values"),
        (b'{"a": [' + b"0," * MAX_NODES + b"0]}", "json", f"more than {MAX_NODES} values"),
        (b"a: !!python/object:os.system x", "yaml", "malformed YAML"),
        # Found by the fuzzer: PyYAML itself raised AttributeError on these.
        (b"a:\n  b: !!timestamp apiVersion\n", "yaml", "line 2 is not a valid !!timestamp"),
        (b"!!timestamp x: 1\n", "yaml", "line 1 is not a valid !!timestamp"),
        (b"a: " + b"9" * 5000, "yaml", "malformed YAML"),
        (b"\xff\xfe", None, "not UTF-8"),
        (b"[1, 2]", "yaml", "must be a mapping, not list"),
        (b"--- {}\n--- {}\n", "yaml", "malformed YAML"),
    ],
)
def test_hostile_shapes_are_malformed(body: bytes, fmt: str | None, message: str) -> None:
    with pytest.raises(MalformedDocumentError, match=message.replace("[", r"\[")):
        decode(body, fmt)  # type: ignore[arg-type]


def test_messages_never_echo_a_whole_body() -> None:
    with pytest.raises(MalformedDocumentError) as caught:
        decode(b'{"a": 1, "' + b"k" * 10_000 + b'": 1, "' + b"k" * 10_000 + b'": 2}', "json")
    assert len(str(caught.value)) < 300


def test_a_hostile_megabyte_stays_within_bounded_memory() -> None:
    """The admin API's largest body (1 MiB), shaped to make the parsers allocate most."""
    megabyte = 1 << 20
    hostile = [
        (b"a: [" + b"0," * (megabyte // 2) + b"0]", "yaml"),
        (b"a:\n" + b"- {k: v}\n" * (megabyte // 9), "yaml"),
        (b'{"a": [' + b"{}," * (megabyte // 3) + b"{}]}", "json"),
        (b"a: " + b"[" * megabyte, "yaml"),
    ]
    for body, fmt in hostile:
        tracemalloc.start()
        with contextlib.suppress(MalformedDocumentError):
            decode(body, fmt)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        # JSON is the worst (25 MiB): CPython builds the whole tree before it is checked.
        assert peak < 40 * megabyte, (body[:20], peak)


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    async with run_controller(tmp_path) as harness:
        yield harness


@pytest.mark.parametrize("kind", ["models", "loraadapters"])
async def test_api_answers_duplicates_with_a_400_naming_key_and_place(
    h: Harness, kind: str
) -> None:
    yaml_body, _ = _yaml_with("    idleTimeout: 1m\n", "    idleTimeout: 5m\n")
    response = await h.client.put(
        f"/v1/admin/{kind}/tiny", content=yaml_body, headers={"Content-Type": "application/yaml"}
    )
    assert response.status_code == 400, response.text
    error = error_of(response.text)
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "DuplicateKeyError"
    assert error["param"] == "spec.serverless.idleTimeout"
    assert "duplicate key 'idleTimeout'" in str(error["message"])
    assert "line 14" in str(error["message"])

    json_body = '{"apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model", "kind": "Model"}'
    response = await h.client.post(
        f"/v1/admin/{kind}", content=json_body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert error_of(response.text)["param"] == "kind"
    assert (await h.client.get(f"/v1/admin/{kind}/tiny")).status_code == 404


async def test_api_refuses_non_finite_numbers_instead_of_failing_later(h: Harness) -> None:
    doc = {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": "tiny"},
        "spec": {"backend": "vllm", "source": "HF://org/tiny", "kvCache": {"highWatermark": 1}},
    }
    body = json.dumps(doc).replace('"highWatermark": 1', '"highWatermark": NaN')
    response = await h.client.put(
        "/v1/admin/models/tiny", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert error_of(response.text)["code"] == "MalformedDocumentError"
    assert (await h.client.get("/v1/admin/models/tiny")).status_code == 404
