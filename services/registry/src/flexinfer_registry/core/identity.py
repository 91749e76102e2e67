"""The rules every name and identity a client sends must pass, checked before anything is
stored: model names, P2P ``SourceIdentity`` and worker fields, pod and source references.

The rules follow what ModelExpress clients send (modelexpress 0.7.0):

- ``model_name``: a Hugging Face id (``org/name``), a provider URL (``s3://bucket/prefix``,
  ``file:///dir``) or, in a P2P identity, the local checkpoint path vLLM or SGLang was
  started with (``/models/llama``): visible ASCII, no backslash, no ``.``/``..`` segments;
- versions, dtypes, quantization, accelerator, GPU arch: short tokens (``0.7.0``,
  ``2.8.0+cu128``, ``bfloat16``, ``compressed-tensors``, ``sm_90``);
- ``worker_id``: ``uuid4().hex[:8]`` (any id of letters, digits and ``. _ : -`` passes);
- ``pod_name`` (a DNS subdomain), ``pod_namespace`` (a DNS label) and ``pod_uid`` (a UUID),
  as the Kubernetes downward API fills ``POD_NAME``, ``POD_NAMESPACE`` and ``POD_UID``;
  empty outside Kubernetes;
- endpoints, agent names, tensor names: visible ASCII (``host:port``, ``[::1]:5555``,
  ``model.layers.0.mlp.experts.w13_weight``); tensor dtypes ``torch.bfloat16``.

Every string is also bounded in length, and a worker's tensors, map entries and a source's
workers in number (:class:`IdentityLimits`). A violation names its field by its proto path
(``identity.model_name``, ``worker.tensor_source.tensors[3].name``) and says why; all of a
request's violations are reported together in one :class:`InvalidFieldsError`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flexinfer_common.errors import InvalidSpecError
from flexinfer_common.mx_identity import SourceIdentity

MAX_MODEL_NAME = 4096
"""The hard ceiling on a model name (PATH_MAX): the configured limit may not exceed it."""


@dataclass(frozen=True)
class IdentityLimits:
    """Bounds on what one request may carry (RegistrySettings.limits documents the reasons)."""

    model_name_chars: int = 1024
    field_chars: int = 256
    map_entries: int = 64
    tensors_per_worker: int = 200_000
    workers_per_source: int = 1024


@dataclass(frozen=True)
class Violation:
    """One field that breaks a rule: its proto path and why."""

    field: str
    reason: str


class InvalidFieldsError(InvalidSpecError):
    """A request with fields that break the rules; ``violations`` lists every one."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        shown = "; ".join(f"{v.field}: {v.reason}" for v in violations[:8])
        more = f" (and {len(violations) - 8} more)" if len(violations) > 8 else ""
        super().__init__(shown + more, field=violations[0].field)
        self.violations = tuple(violations)


@dataclass(frozen=True)
class WorkerFields:
    """The strings and counts of a WorkerMetadata, decoded at the edge to be checked (the
    message itself is stored opaque)."""

    accelerator: str = ""
    agent_name: str = ""
    metadata_endpoint: str = ""
    worker_grpc_endpoint: str = ""
    transfer_engine_session_id: str = ""
    artifact_id: str = ""
    topology: Mapping[str, str] = field(default_factory=dict)
    tensors: Sequence[tuple[str, str]] = ()
    """(name, dtype) of each tensor, ``tensor_source.tensors`` then the legacy ``tensors``."""
    tensors_field: str = "worker.tensor_source.tensors"


@dataclass(frozen=True)
class _Rule:
    """Which characters a field may hold, and how to say so."""

    allowed: re.Pattern[str]
    says: str


TOKEN = _Rule(re.compile(r"[A-Za-z0-9._+:-]*"), "letters, digits and . _ + : -")
VISIBLE = _Rule(re.compile(r"[\x21-\x5b\x5d-\x7e]*"), "visible ASCII characters (no spaces, no \\)")
WORKER_ID = _Rule(re.compile(r"[A-Za-z0-9._:-]*"), "letters, digits and . _ : -")
MAP_KEY = _Rule(re.compile(r"[A-Za-z0-9._/-]*"), "letters, digits and . _ / -")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_UUID = re.compile(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_SOURCE_ID = re.compile(r"[0-9a-f]{16}")
_MODEL_NAME = _Rule(VISIBLE.allowed, VISIBLE.says)


def _shown(text: str) -> str:
    """A short, printable rendering of hostile input for error messages."""
    return repr(text[:40]) + ("..." if len(text) > 40 else "")


def _first_bad(text: str, rule: _Rule) -> str | None:
    """Why ``text`` breaks ``rule`` (its first bad character), or None."""
    if rule.allowed.fullmatch(text):
        return None
    at = next(i for i, c in enumerate(text) if not rule.allowed.fullmatch(c))
    return f"character {text[at]!r} at position {at} is not allowed (only {rule.says})"


def model_name_problem(name: str, max_chars: int, *, absolute_ok: bool = False) -> str | None:
    """Why ``name`` is not an acceptable model name, or None (see the module docstring)."""
    if not name:
        return "is required"
    if len(name) > max_chars:
        return f"is {len(name)} characters long, over the limit of {max_chars}"
    bad = _first_bad(name, _MODEL_NAME)
    if bad is not None:
        return bad
    scheme, sep, rest = name.partition("://")
    is_url = bool(sep) and scheme.isalnum()
    body = rest if is_url else name
    if body.startswith("/") and not (is_url or absolute_ok):
        return f"must not be an absolute path (use file:///...): {_shown(name)}"
    if any(s in (".", "..") for s in body.split("/")):
        return f"must not contain '.' or '..' segments: {_shown(name)}"
    return None


class Checker:
    """Collects the violations of one request; :meth:`done` raises them together."""

    def __init__(self, limits: IdentityLimits) -> None:
        self.limits = limits
        self.found: list[Violation] = []

    def fail(self, where: str, reason: str) -> None:
        """Record one violation."""
        self.found.append(Violation(where, reason))

    def done(self) -> None:
        """InvalidFieldsError with every violation found, if any."""
        if self.found:
            raise InvalidFieldsError(self.found)

    def text(
        self, where: str, value: str, rule: _Rule, *, required: bool = False, max_chars: int = 0
    ) -> None:
        """A string field: present if required, within its length, only allowed characters."""
        limit = max_chars or self.limits.field_chars
        if not value:
            if required:
                self.fail(where, "is required")
            return
        if len(value) > limit:
            self.fail(where, f"is {len(value)} characters long, over the limit of {limit}")
            return
        bad = _first_bad(value, rule)
        if bad is not None:
            self.fail(where, bad)

    def model_name(self, where: str, name: str, *, absolute_ok: bool = False) -> None:
        """A model name (see :func:`model_name_problem`)."""
        problem = model_name_problem(name, self.limits.model_name_chars, absolute_ok=absolute_ok)
        if problem is not None:
            self.fail(where, problem)

    def printable(self, where: str, value: str) -> None:
        """Free text (extra parameter values): any printable Unicode, bounded."""
        limit = self.limits.field_chars
        if len(value) > limit:
            self.fail(where, f"is {len(value)} characters long, over the limit of {limit}")
        elif any(unicodedata.category(c)[0] in "CZ" and c != " " for c in value):
            self.fail(where, f"contains control or separator characters: {_shown(value)}")

    def string_map(self, where: str, values: Mapping[str, str], *, free_values: bool) -> None:
        """A map<string, string>: bounded entries, token keys, bounded values."""
        if len(values) > self.limits.map_entries:
            limit = self.limits.map_entries
            self.fail(where, f"has {len(values)} entries, over the limit of {limit}")
            return
        for key, value in values.items():
            self.text(f"{where}[{_shown(key)}]", key, MAP_KEY, required=True)
            if free_values:
                self.printable(f"{where}[{_shown(key)}]", value)
            else:
                self.text(f"{where}[{_shown(key)}]", value, VISIBLE)

    def number(self, where: str, value: int) -> None:
        """An enum value: never negative (proto3 enums are open, so new values pass)."""
        if value < 0:
            self.fail(where, f"must not be negative, got {value}")

    def identity(self, where: str, identity: SourceIdentity) -> None:
        """Every field of a SourceIdentity; ``model_name`` is required."""
        self.model_name(f"{where}.model_name", identity.model_name, absolute_ok=True)
        self.number(f"{where}.mx_source_type", identity.mx_source_type)
        self.number(f"{where}.backend_framework", identity.backend_framework)
        for name in _IDENTITY_TOKENS:
            self.text(f"{where}.{name}", getattr(identity, name), TOKEN)
        for name in ("revision", "compile_config_digest"):
            self.text(f"{where}.{name}", getattr(identity, name), VISIBLE)
        self.string_map(f"{where}.extra_parameters", identity.extra_parameters, free_values=True)

    def worker(self, worker: WorkerFields) -> None:
        """The strings and counts of a WorkerMetadata."""
        self.text("worker.accelerator", worker.accelerator, TOKEN)
        for name in _WORKER_VISIBLE:
            self.text(f"worker.{name}", getattr(worker, name), VISIBLE)
        self.text("worker.artifact_source.artifact_id", worker.artifact_id, VISIBLE)
        self.string_map("worker.topology", worker.topology, free_values=False)
        limit = self.limits.tensors_per_worker
        if len(worker.tensors) > limit:
            count = len(worker.tensors)
            self.fail(worker.tensors_field, f"has {count} tensors, over the limit of {limit}")
            return
        for index, (name, dtype) in enumerate(worker.tensors):
            self.text(f"{worker.tensors_field}[{index}].name", name, VISIBLE, required=True)
            self.text(f"{worker.tensors_field}[{index}].dtype", dtype, TOKEN)
            if len(self.found) > 100:  # one bad publisher must not make us list 200k errors
                return

    def worker_id(self, where: str, worker_id: str, *, required: bool) -> None:
        """A worker id (``uuid4().hex[:8]`` from modelexpress; empty = by rank)."""
        self.text(where, worker_id, WORKER_ID, required=required, max_chars=128)

    def source_id(self, where: str, mx_source_id: str) -> None:
        """An mx_source_id: the 16 lower-case hex digits compute_mx_source_id gives."""
        if not _SOURCE_ID.fullmatch(mx_source_id):
            self.fail(where, f"must be 16 lower-case hex digits, got {_shown(mx_source_id)}")

    def pod(self, name: str, uid: str, namespace: str) -> None:
        """The Kubernetes pod fields (each may be empty outside Kubernetes)."""
        if namespace and not _DNS_LABEL.fullmatch(namespace):
            self.fail("pod_namespace", f"must be a DNS label (RFC 1123), got {_shown(namespace)}")
        if name and (len(name) > 253 or not all(_DNS_LABEL.fullmatch(p) for p in name.split("."))):
            self.fail("pod_name", f"must be a DNS subdomain (RFC 1123), got {_shown(name)}")
        if uid and not _UUID.fullmatch(uid):
            self.fail("pod_uid", f"must be a UUID, got {_shown(uid)}")


_IDENTITY_TOKENS = (
    "mx_version",
    "dtype",
    "quantization",
    "backend_framework_version",
    "torch_version",
    "cuda_version",
    "triton_version",
    "gpu_arch",
)
_WORKER_VISIBLE = (
    "agent_name",
    "metadata_endpoint",
    "worker_grpc_endpoint",
    "transfer_engine_session_id",
)
