"""kube-scheduler's extender JSON (k8s.io/kube-scheduler/extender/v1), read leniently.

kube-scheduler sends the current JSON tags (``pod``, ``nodes``, ``nodenames``); older
configurations send Go's capitalised field names (``Pod``, ``NodeNames``), and Go's decoder
matches either, case-insensitively. So does ``field``. Answers use the current tags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any

from flexinfer_common.placement.facts import Malformed, PodFacts, pod_facts, requested_gpus

Obj = Mapping[str, Any]


class BadExtenderArgsError(ValueError):
    """The request is not an ExtenderArgs (answered 400)."""


@dataclass(frozen=True, slots=True)
class ExtenderRequest:
    """One ExtenderArgs: the pod, and the nodes as objects (``nodes``) or names only."""

    pod: PodFacts
    nodes: list[Obj] | None
    node_names: list[str] | None
    node_meta: list[tuple[str, dict[str, str], dict[str, str]]] | None = None
    """Each of ``nodes``' (name, labels, annotations), checked when parsed."""


def field(obj: Obj, name: str) -> Any:
    """``obj[name]``, else the first key equal to ``name`` ignoring case (Go's rule)."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if key.lower() == lowered:
            return value
    return None


def _object(value: Any, where: str, *, required: bool = False) -> Obj:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise BadExtenderArgsError(f"{where} must be an object")
    return value


def _strings(value: Any, where: str) -> dict[str, str]:
    mapping = _object(value, where)
    if not all(isinstance(v, str) for v in mapping.values()):
        raise BadExtenderArgsError(f"{where} must map strings to strings")
    return dict(mapping)


def _quantities(value: Any, where: str) -> dict[str, str]:
    # A Quantity decodes from a JSON string or number.
    mapping = _object(value, where)
    out: dict[str, str] = {}
    for key, quantity in mapping.items():
        if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
            raise BadExtenderArgsError(f"{where}.{key} must be a quantity")
        out[key] = str(quantity)
    return out


def metadata(obj: Obj, where: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """An object's (name, labels, annotations)."""
    meta = _object(field(obj, "metadata"), f"{where}.metadata")
    name = field(meta, "name")
    if name is not None and not isinstance(name, str):
        raise BadExtenderArgsError(f"{where}.metadata.name must be a string")
    labels = _strings(field(meta, "labels"), f"{where}.metadata.labels")
    annotations = _strings(field(meta, "annotations"), f"{where}.metadata.annotations")
    return name or "", labels, annotations


def _containers(pod: Obj) -> list[tuple[dict[str, str], dict[str, str]]]:
    spec = _object(field(pod, "spec"), "pod.spec")
    containers = field(spec, "containers")
    if containers is None:
        containers = []
    if not isinstance(containers, list):
        raise BadExtenderArgsError("pod.spec.containers must be an array")
    out = []
    for i, container in enumerate(containers):
        where = f"pod.spec.containers[{i}].resources"
        resources = _object(
            field(_object(container, f"pod.spec.containers[{i}]", required=True), "resources"),
            where,
        )
        limits = _quantities(field(resources, "limits"), f"{where}.limits")
        requests = _quantities(field(resources, "requests"), f"{where}.requests")
        out.append((limits, requests))
    return out


def parse_pod(value: Any, sink: Malformed) -> PodFacts:
    """The pod's facts from a v1.Pod object."""
    pod = _object(value, "pod", required=True)
    name, labels, annotations = metadata(pod, "pod")
    namespace = field(_object(field(pod, "metadata"), "pod.metadata"), "namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise BadExtenderArgsError("pod.metadata.namespace must be a string")
    phase = field(_object(field(pod, "status"), "pod.status"), "phase")
    return pod_facts(
        namespace=namespace or "default",
        name=name,
        labels=labels,
        annotations=annotations,
        gpu_count=requested_gpus(_containers(pod), sink),
        sink=sink,
        phase=phase if isinstance(phase, str) else None,
    )


def _node_items(value: Any) -> list[Obj] | None:
    if value is None:
        return None
    items = field(_object(value, "nodes"), "items")
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise BadExtenderArgsError("nodes.items must be an array of Node objects")
    return items


def _names(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, list):
        try:
            # join type-checks every item in C: a thousand names in microseconds, where an
            # isinstance per name costs several times more.
            "".join(value)
        except TypeError:
            pass
        else:
            return value
    raise BadExtenderArgsError("nodenames must be an array of strings")


def parse_args(body: Any, sink: Malformed) -> ExtenderRequest:
    """An ExtenderArgs body (decoded JSON); BadExtenderArgsError says what is wrong."""
    if not isinstance(body, Mapping):
        raise BadExtenderArgsError("the body must be an ExtenderArgs object")
    pod = parse_pod(field(body, "pod"), sink)
    nodes = _node_items(field(body, "nodes"))
    names = _names(field(body, "nodenames"))
    if nodes is None and names is None:
        raise BadExtenderArgsError("ExtenderArgs carries neither nodes nor nodenames")
    meta = None
    if nodes is not None:
        meta = [metadata(obj, f"nodes.items[{i}]") for i, obj in enumerate(nodes)]
        if not all(name for name, _, _ in meta):
            raise BadExtenderArgsError("every node in nodes.items needs metadata.name")
    return ExtenderRequest(pod, nodes, names, meta)


def filter_result(
    passed_json: Sequence[str], failed_json: Sequence[str], reasons: Sequence[str]
) -> bytes:
    """An ExtenderFilterResult's JSON without Node objects, byte for byte what ``json.dumps``
    with compact separators writes for ``{"nodenames": [...], "failedNodes": {name: reason,
    ...}, "failedAndUnresolvableNodes": {}}``, from the passing and failed names already
    encoded as JSON strings (``NodeColumns.name_json``: encoded once per node, not per
    answer), each failed name once, and the failed nodes' reasons in the same order."""
    # Names, reasons and separators interleaved into one join: no string per entry. (Encoding
    # each distinct reason once was faster when a few reasons repeat, as in bench/scheduler.py,
    # and a third slower when every free-VRAM figure differs: not done.)
    if len(failed_json) != len(reasons):
        raise ValueError(f"{len(failed_json)} failed nodes but {len(reasons)} reasons")
    parts = ["", ":", "", ","] * len(reasons)
    parts[::4] = failed_json
    parts[2::4] = map(encode_basestring_ascii, reasons)
    failed = "".join(parts)[:-1]
    return (
        '{"nodenames":['
        + ",".join(passed_json)
        + '],"failedNodes":{'
        + failed
        + '},"failedAndUnresolvableNodes":{}}'
    ).encode()


def host_priority_list(hosts: Sequence[str], scores: Sequence[int]) -> bytes:
    """A HostPriorityList's JSON, byte for byte what ``json.dumps`` with compact separators
    writes for ``[{"host": h, "score": s}, ...]``."""
    return host_priority_list_json(list(map(encode_basestring_ascii, hosts)), scores)


class _ScoreTails(dict[int, str]):
    """Each score's text, up to the next entry's host, formatted on first use."""

    def __missing__(self, score: int) -> str:
        tail = self[score] = f',"score":{score:d}}},{{"host":'
        return tail


_EXTENDER_SCORE_TAILS = {score: _ScoreTails()[score] for score in range(11)}
"""The texts of the extender's own scores (0..10), formatted once: each answer copies them."""


def host_priority_list_json(hosts_json: Sequence[str], scores: Sequence[int]) -> bytes:
    """``host_priority_list`` from the hosts already encoded as JSON strings, without a dict
    per host (the encoding of a thousand dicts cost more than scoring them)."""
    if len(hosts_json) != len(scores):
        raise ValueError(f"{len(hosts_json)} hosts but {len(scores)} scores")
    if not hosts_json:
        return b"[]"
    # Hosts and their scores' texts are interleaved into one join (no string per entry:
    # half the time of joining host + text pairs); itemgetter picks the texts in one C loop.
    tails = _ScoreTails(_EXTENDER_SCORE_TAILS)
    parts = [""] * (2 * len(scores))
    parts[::2] = hosts_json
    parts[1::2] = itemgetter(*scores)(tails) if len(scores) > 1 else [tails[scores[0]]]
    parts[-1] = f',"score":{scores[-1]:d}}}]'
    return ('[{"host":' + "".join(parts)).encode()
