"""Fuzz the Model document parser: arbitrary bytes and near-valid JSON/YAML documents.

Whatever the body, ``decode`` + ``parse_model`` raise only their own errors (400/422 at
the API), and what they accept can be answered as JSON and parses back to itself. CI runs
a bounded number of examples; ``bench/fuzz_documents.py --examples N`` runs these same
strategies for longer and records the figures in bench/RESULTS.md.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.core.documents import MalformedDocumentError, decode, parse_model

CI_EXAMPLES = 300

VALID: dict[str, Any] = {
    "apiVersion": "ai.flexinfer/v1alpha2",
    "kind": "Model",
    "metadata": {"name": "tiny", "namespace": "default", "labels": {"team": "ml"}},
    "spec": {
        "backend": "vllm",
        "source": "HF://org/tiny",
        "gpu": {"vendor": "cpu"},
        "litellm": {"servedModelName": "tiny-chat", "aliases": ["a", "b"]},
        "serverless": {"idleTimeout": "5m", "minReplicas": 0, "coldStartTimeout": "60s"},
        "kvCache": {"highWatermark": 0.9},
    },
    "status": {"phase": "Ready"},
}

YAML_FRAGMENTS = [
    "a: 1\n", "a: 1\n", "- x\n", "  ", "\t", "? ", ": ", "{", "}", "[", "]", ",", "&x ", "*x",
    "<<: ", "!!binary ", "!!set ", "!!omap ", "!!timestamp ", "!!python/object:os.system ",
    "!custom ", "%YAML 1.1\n", "---\n", "...\n", "'", '"', "|\n", ">-\n", "# c\n", ".nan",
    ".inf", "-.inf", "0x1F", "0o17", "1e999", "9" * 50, "2001-12-14t21:59:43.10-05:00",
    "~", "yes", "no", "null", "\\u0000", "\x00", "\ufeff", "é", "\u2028", "kind: Model\n",
    "metadata:\n  name: x\n", "spec:\n  backend: vllm\n",
]  # fmt: skip


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON-like value, non-finite floats and odd keys included."""
    leaves = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=20)
    )
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=10), children, max_size=4)
        ),
        max_leaves=20,
    )


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _paths(child, (*prefix, i))
    return out


@st.composite
def near_valid_documents(draw: st.DrawFn) -> dict[str, Any]:
    """VALID with a few values replaced, keys dropped, or unknown keys added."""
    doc = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values())
        elif action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(json_values())
    return doc


def _serialize(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc)
    return yaml.safe_dump(doc, sort_keys=False)


@st.composite
def near_valid_bodies(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """A near-valid document as JSON or YAML, sometimes with its text mutated too."""
    fmt = draw(st.sampled_from(["json", "yaml"]))
    text = _serialize(draw(near_valid_documents()), fmt)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "duplicate-line"]))
        if action == "insert":
            text = text[:at] + draw(st.sampled_from(YAML_FRAGMENTS)) + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 8)) :]
        else:
            lines = text.splitlines(keepends=True)
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                lines.insert(i, lines[i])
                text = "".join(lines)
    return text.encode("utf-8", errors="surrogatepass"), draw(st.sampled_from([fmt, None]))


@st.composite
def yaml_soup(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """Fragments of YAML syntax (tags, anchors, flow, directives) glued together."""
    parts = draw(st.lists(st.sampled_from(YAML_FRAGMENTS), max_size=30))
    return "".join(parts).encode("utf-8", errors="surrogatepass"), "yaml"


def arbitrary_bodies() -> st.SearchStrategy[tuple[bytes, str | None]]:
    """Any bytes, told to be JSON, YAML or neither."""
    return st.tuples(st.binary(max_size=2048), st.sampled_from(["json", "yaml", None]))


def all_bodies() -> st.SearchStrategy[tuple[bytes, str | None]]:
    """Every family of fuzzed bodies."""
    return arbitrary_bodies() | near_valid_bodies() | yaml_soup()


def check_body(body: bytes, fmt: str | None) -> str:
    """Parse as the admin API does; the outcome's name. Fails on any other exception."""
    try:
        doc = decode(body, fmt)  # type: ignore[arg-type]
        model = parse_model(doc, namespace=None, default_namespace="default", path_name=None)
    except MalformedDocumentError:
        return "400"
    except InvalidSpecError:
        return "422"
    # What was accepted is answered as strict JSON and parses back to the same Model.
    answered = json.dumps(model.model_dump(mode="json", by_alias=True), allow_nan=False)
    again = parse_model(
        decode(answered.encode(), "json"), namespace=None, default_namespace="default"
    )
    assert again == model
    assert isinstance(model, Model)
    return "accepted"


FUZZ = settings(
    max_examples=CI_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FUZZ
@given(arbitrary_bodies())
def test_arbitrary_bytes(case: tuple[bytes, str | None]) -> None:
    check_body(*case)


@FUZZ
@given(near_valid_bodies())
def test_near_valid_documents(case: tuple[bytes, str | None]) -> None:
    check_body(*case)


@FUZZ
@given(yaml_soup())
def test_yaml_syntax_soup(case: tuple[bytes, str | None]) -> None:
    check_body(*case)


def test_the_strategies_reach_every_outcome() -> None:
    """The fuzzing is not vacuous: valid, invalid and malformed documents all occur."""
    assert check_body(json.dumps(VALID).encode(), None) == "accepted"
    assert check_body(yaml.safe_dump(VALID).encode(), None) == "accepted"
    broken = copy.deepcopy(VALID)
    broken["spec"]["backend"] = 7
    assert check_body(json.dumps(broken).encode(), "json") == "422"
    assert check_body(b"{", "json") == "400"
