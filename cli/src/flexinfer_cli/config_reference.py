"""docs/configuration.md, generated from the pydantic-settings classes of every service.

Each settings class is walked field by field: a field whose type is itself a settings group
(``bus``, ``telemetry``, ``sleep``...) is built by its own ``default_factory`` from its own
``FLEXINFER_<GROUP>_`` prefix, so its variables are listed under that group. Descriptions are
the fields' attribute docstrings, read from the source with ``ast`` (pydantic does not keep
them unless every class opts in to ``use_attribute_docstrings``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import json
import socket
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pydantic import AliasChoices, AliasPath, BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

REGENERATE = "flexinfer docs config"
"""The command that rewrites docs/configuration.md (also ``./dev docs``)."""


@dataclass(frozen=True)
class Section:
    """One heading of the reference: a settings class and the words that introduce it."""

    title: str
    target: str
    """``module:Class`` of the settings class, imported only when the page is built."""
    intro: str

    def settings_class(self) -> type[BaseSettings]:
        """The settings class this section documents."""
        module, name = self.target.split(":")
        cls = getattr(importlib.import_module(module), name)
        if not (isinstance(cls, type) and issubclass(cls, BaseSettings)):
            raise TypeError(f"{self.target} is not a pydantic-settings class")
        return cls


SERVICES = (
    Section("proxy", "flexinfer_proxy.settings:ProxySettings", "The OpenAI-compatible front door."),
    Section(
        "controller",
        "flexinfer_controller.settings:ControllerSettings",
        "Reconciles Models into engines, locally or on Kubernetes.",
    ),
    Section(
        "scheduler",
        "flexinfer_scheduler.settings:SchedulerSettings",
        "Placement, and the Kubernetes scheduler extender.",
    ),
    Section(
        "registry",
        "flexinfer_registry.settings:RegistrySettings",
        "Model downloads and the shared weight cache (ModelExpress-compatible gRPC).",
    ),
    Section(
        "agent", "flexinfer_agent.settings:AgentSettings", "Per-node GPU discovery and labels."
    ),
    Section(
        "engine",
        "flexinfer_engine.settings:EngineSettings",
        "The reference engine (the controller starts it; its command line takes precedence).",
    ),
)
"""One section per service, each its top-level settings class."""

LIBRARIES = (
    Section(
        "bus client",
        "flexinfer_common.bus.settings:BusClientSettings",
        "How every service's Redis client behaves (same prefix as the bus group).",
    ),
    Section(
        "transfer",
        "flexinfer_transfer.settings:TransferSettings",
        "Weight transfer between engines (libs/transfer), read by the engines and registry.",
    ),
    Section(
        "transfer artifacts",
        "flexinfer_transfer.artifact_settings:ArtifactSettings",
        "Serving and fetching compiled artifacts between engines.",
    ),
    Section(
        "transfer peer source",
        "flexinfer_transfer.peer_source:PeerSourceSettings",
        "An engine publishing its weights to peers.",
    ),
    Section(
        "transfer in vLLM and SGLang",
        "flexinfer_transfer.engine_loading:EngineLoadingSettings",
        "FlexInfer's loader inside vLLM or SGLang: where it finds peers (also under "
        "ModelExpress's MX_ names).",
    ),
    Section(
        "ModelExpress service directory",
        "flexinfer_transfer.k8s_service_directory:K8sServiceSettings",
        "Finding peers through Kubernetes Services, with ModelExpress's MX_ names.",
    ),
)
"""Settings read by libraries wherever they run, outside any service's top-level class."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: the names that set it and what the field says about it."""

    names: tuple[str, ...]
    """The documented name first; the others are accepted aliases (the operator's)."""
    owner: type[BaseSettings]
    path: tuple[str, ...]
    """Attribute path from the section's class to the field (``("bus", "url")``)."""
    type: str
    default: str
    unit: str
    description: str


def env_names(cls: type[BaseSettings], name: str, field: FieldInfo) -> tuple[str, ...]:
    """The environment variables pydantic-settings reads for ``field``, upper case.

    A validation alias replaces the prefixed name; lower-case alias choices are the field's
    own name (for keyword construction) and are not meant as variables.
    """
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        choices = [c for c in alias.choices if isinstance(c, str) and c.isupper()]
        return tuple(choices)
    if isinstance(alias, AliasPath):
        raise TypeError(f"{cls.__name__}.{name}: AliasPath is not an environment variable")
    if isinstance(alias, str):
        return (alias.upper(),)
    prefix = str(cls.model_config.get("env_prefix", ""))
    return ((prefix + (field.alias or name)).upper(),)


def attribute_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal right after its assignment, over the class's MRO."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith(("pydantic", "builtins")):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
                continue
            literal = after.value if isinstance(after, ast.Expr) else None
            doc = literal.value if isinstance(literal, ast.Constant) else None
            if isinstance(doc, str):
                docs[node.target.id] = " ".join(inspect.cleandoc(doc).split())
    return docs


def nested_group(field: FieldInfo) -> type[BaseSettings] | None:
    """The settings group a field holds (built from its own prefix), if it holds one."""
    factory = field.default_factory
    if isinstance(factory, type) and issubclass(factory, BaseSettings):
        return factory
    return None


def type_name(annotation: object) -> str:
    """A reader's name for a field's type (``float``, ``list of str``, one of literals)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"JSON list of {type_name(args[0])}" if args else "JSON list"
    if origin is dict:
        return f"JSON object of {type_name(args[1])}" if args else "JSON object"
    if annotation is type(None):
        return "unset"
    if annotation is SecretStr:
        return "secret str"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.__name__
    if isinstance(annotation, type):
        return "path" if issubclass(annotation, Path) else annotation.__name__
    return str(annotation)


def is_secret(name: str, field: FieldInfo) -> bool:
    """Whether the field holds a credential, whose value the page must never show: a
    ``SecretStr``, or a list of bearer tokens (the proxy's ``auth_tokens``)."""
    return "SecretStr" in repr(field.annotation) or name.endswith("auth_tokens")


def _factory_text(factory: typing.Callable[[], object]) -> str:
    """A default_factory's default: a constant one's value, else what its docstring says."""
    if factory is socket.gethostname:
        return "this machine's hostname"
    if getattr(factory, "__name__", "") == "<lambda>":
        return f"`{json.dumps(factory(), default=str)}`"
    doc = str(inspect.getdoc(factory) or getattr(factory, "__name__", repr(factory)))
    return "computed: " + doc.splitlines()[0].rstrip(".")


def default_text(name: str, field: FieldInfo) -> str:
    """The default as the page shows it: machine-dependent values are described."""
    if is_secret(name, field):
        return "(secret)"
    factory = field.default_factory
    if factory is not None:
        if factory in (list, tuple, set, frozenset):
            return "`[]`"
        if factory is dict:
            return "`{}`"
        return _factory_text(typing.cast(typing.Callable[[], object], factory))
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, str) and value == sys.executable:
        return "the running Python"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`" if str(value) != "" else '`""`'


def _is_duration(field: FieldInfo) -> bool:
    """A field parsed by the proxy's ``Seconds`` validator: Go durations are accepted."""
    return any("_seconds" in repr(m) for m in field.metadata)


def unit(name: str, field: FieldInfo) -> str:
    """The field's unit, from its name suffix or its seconds validator."""
    suffixes = {"_s": "s", "_seconds": "s", "_ms": "ms", "_bytes": "bytes", "_kb": "KiB"}
    suffixes |= {"_mb": "MiB", "_mib": "MiB", "_gib": "GiB", "_rps": "requests/s"}
    suffixes |= {"_chars": "characters", "_length": "characters"}
    for suffix, text in suffixes.items():
        if name.endswith(suffix):
            return text
    return "s" if _is_duration(field) else ""


def variables(cls: type[BaseSettings], path: tuple[str, ...] = ()) -> Iterator[Variable]:
    """Every variable a settings class reads, its nested groups' included, in field order."""
    docs = attribute_docs(cls)
    for name, field in cls.model_fields.items():
        group = nested_group(field)
        if group is not None:
            yield from variables(group, (*path, name))
            continue
        yield Variable(
            names=env_names(cls, name, field),
            owner=cls,
            path=(*path, name),
            type="duration" if _is_duration(field) else type_name(field.annotation),
            default=default_text(name, field),
            unit=unit(name, field),
            description=docs.get(name, ""),
        )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") if "\\|" not in text else text


def table(rows: list[Variable]) -> list[str]:
    """A Markdown table of variables."""
    lines = ["| Variable | Type | Default | Unit | Description |", "|---|---|---|---|---|"]
    for v in rows:
        name = f"`{v.names[0]}`" + "".join(f" (or `{alias}`)" for alias in v.names[1:])
        lines.append(
            f"| {name} | {_cell(v.type)} | {_cell(v.default)} | {v.unit or '-'} "
            f"| {_cell(v.description)} |"
        )
    return lines


def _groups(cls: type[BaseSettings]) -> list[type[BaseSettings]]:
    """The settings groups a class nests, directly or through other groups."""
    found: list[type[BaseSettings]] = []
    for field in cls.model_fields.values():
        group = nested_group(field)
        if group is not None:
            found += [group, *_groups(group)]
    return found


def shared_groups() -> list[type[BaseSettings]]:
    """Groups nested by more than one service: documented once, linked from each service."""
    seen: dict[type[BaseSettings], int] = {}
    for section in SERVICES:
        for group in dict.fromkeys(_groups(section.settings_class())):
            seen[group] = seen.get(group, 0) + 1
    return [group for group, count in seen.items() if count > 1]


def _prefix(cls: type[BaseSettings]) -> str:
    return str(cls.model_config.get("env_prefix", ""))


def _anchor(cls: type[BaseSettings]) -> str:
    return "shared-" + _prefix(cls).removeprefix("FLEXINFER_").rstrip("_").lower().replace("_", "-")


HEADER = """# Configuration reference

<!-- Generated by `{command}` from the pydantic-settings classes; do not edit by hand. -->

Every service reads its settings from environment variables (a `.env` file is not read).
A service's own variables start with its prefix (`FLEXINFER_PROXY_`, ...); groups such as
the bus, the store, telemetry and logging have their own prefix (`FLEXINFER_BUS_`, ...) and
are documented once under [Shared groups](#shared-groups). Names are case-insensitive.
The unit column says what a number counts (`s`: seconds); a `duration` takes seconds or a
Go duration such as `90s` or `1m30s`. Lists and objects are JSON
(`FLEXINFER_PROXY_AUTH_TOKENS='["..."]'`). A command-line flag, where a service has one,
wins over the variable. Secrets are never shown: their default is written `(secret)`.

Regenerate this page with `{command}` (or `./dev docs`); a test fails when it is stale.
"""


def render() -> str:
    """The whole docs/configuration.md page."""
    shared = shared_groups()
    lines = [HEADER.format(command=REGENERATE), "## Services", ""]
    for section in SERVICES:
        cls = section.settings_class()
        mine = [v for v in variables(cls) if v.owner not in shared]
        lines += [f"### {section.title}", "", f"{section.intro} Prefix `{_prefix(cls)}`.", ""]
        lines += table(mine)
        links = [
            f"[`{_prefix(g)}*`](#{_anchor(g)})" for g in dict.fromkeys(_groups(cls)) if g in shared
        ]
        if links:
            lines += ["", "Also reads the shared groups " + ", ".join(links) + "."]
        lines.append("")
    lines += ["## Shared groups", ""]
    for group in shared:
        intro = (inspect.getdoc(group) or group.__name__).splitlines()[0]
        lines += [f"### shared {_anchor(group).removeprefix('shared-')}", "", intro, ""]
        lines += [*table(list(variables(group))), ""]
    lines += ["## Libraries", ""]
    for section in LIBRARIES:
        cls = section.settings_class()
        lines += [f"### {section.title}", "", f"{section.intro} Prefix `{_prefix(cls)}`.", ""]
        lines += [*table(list(variables(cls))), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def documented_classes() -> set[type[BaseSettings]]:
    """Every settings class the page covers, nested groups included."""
    classes: set[type[BaseSettings]] = set()
    for section in (*SERVICES, *LIBRARIES):
        cls = section.settings_class()
        classes |= {cls, *_groups(cls)}
    return classes


def write(path: Path, *, check: bool) -> bool:
    """Write the page to ``path`` (or only compare, with ``check``); True if it changed."""
    text = render()
    if path.is_file() and path.read_text() == text:
        return False
    if not check:
        path.write_text(text)
    return True
