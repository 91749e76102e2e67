"""docs/configuration.md: current, complete, and every variable it lists is really read."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

import pydantic
import pytest
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_cli.__main__ import main
from flexinfer_cli.config_reference import (
    LIBRARIES,
    REGENERATE,
    SERVICES,
    Section,
    Variable,
    documented_classes,
    render,
    variables,
)
from flexinfer_common.errors import FlexInferError
from flexinfer_testing.repo import repo_root

REPO = repo_root()
PAGE = REPO / "docs" / "configuration.md"
PREFIXES = ("FLEXINFER_", "SCHED_", "MX_", "PROXY_", "MODEL_EXPRESS_", "POD_NAMESPACE")
SAMPLES = (
    "sample.yaml",
    "sample-value-1",
    "DEBUG",
    "7",
    "1",
    "0.5",
    "65536",
    "/tmp/flexinfer-sample",
    '["/tmp/flexinfer-sample"]',
    '["sample-token-123456"]',
    '{"sample": 1}',
    '[{"vendor": "nvidia", "count": 2}]',
    "example.com/",
)
"""Values tried for a field whose type offers no better one, until one validates;
``sample.yaml`` is an empty config file in the test's working directory."""


def _all_variables() -> Iterator[tuple[Section, Variable]]:
    for section in (*SERVICES, *LIBRARIES):
        for variable in variables(section.settings_class()):
            yield section, variable


def test_the_committed_page_is_current() -> None:
    assert PAGE.read_text() == render(), f"docs/configuration.md is stale: run '{REGENERATE}'"


def test_check_reports_drift_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "configuration.md"
    out.write_text("# old\n")
    assert main(["docs", "config", "--check", "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"flexinfer docs: out of date: {out} (run 'flexinfer docs config')"
    )
    assert out.read_text() == "# old\n"
    assert main(["docs", "config", "--out", str(out)]) == 0
    assert out.read_text() == render()
    assert main(["docs", "config", "--check", "--out", str(out)]) == 0


def test_the_command_runs_as_documented() -> None:
    """``flexinfer docs config --check`` as a process, on the committed page."""
    result = subprocess.run(
        [sys.executable, "-m", "flexinfer_cli", "docs", "config", "--check", "--out", str(PAGE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_field_has_a_description() -> None:
    missing = [f"{v.owner.__name__}.{v.path[-1]}" for _, v in _all_variables() if not v.description]
    assert missing == [], "add an attribute docstring (unit, why the default) to these fields"


def test_secrets_are_never_shown() -> None:
    text = render()
    secret_rows = [line for line in text.splitlines() if "_AUTH_TOKEN`" in line]
    assert secret_rows, "the admin tokens are listed"
    assert all("| (secret) |" in row for row in secret_rows)
    assert "`FLEXINFER_PROXY_AUTH_TOKENS` | JSON list of str | (secret) |" in text


def _settings_classes_in_source() -> set[str]:
    """``module:Class`` of every pydantic-settings class defined under the packages' src."""
    found: dict[str, list[str]] = {}
    for root in (*REPO.glob("services/*/src"), *REPO.glob("libs/*/src"), REPO / "cli" / "src"):
        for path in root.rglob("*.py"):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                    found[f"{module}:{node.name}"] = bases
    settings = {"BaseSettings"}
    while True:  # subclasses of subclasses (AdminAuthSettings -> ControllerSettings)
        more = {name.split(":")[1] for name, bases in found.items() if settings & set(bases)}
        if more <= settings:
            break
        settings |= more
    return {name for name, bases in found.items() if settings & set(bases)}


def test_every_settings_class_is_documented() -> None:
    documented = {f"{c.__module__}:{c.__name__}" for c in documented_classes()}
    # Inherited into every service's own class, with that class's prefix.
    documented.add("flexinfer_common.auth:AdminAuthSettings")
    missing = _settings_classes_in_source() - documented
    assert missing == set(), "add these classes to SERVICES or LIBRARIES in config_reference"


def _candidates(field: pydantic.fields.FieldInfo) -> Iterator[str]:
    """Raw environment values to try for a field, the likeliest valid first."""
    annotation = field.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Literal:
        yield from (str(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        yield from (str(m.value) for m in annotation)
    if annotation is bool:
        yield from ("true", "false")
    if annotation in (int, float) and isinstance(field.default, int | float):
        yield from (str(field.default + 1), str(field.default * 2), str(field.default - 1))
    yield from SAMPLES


def _read(section: Section, path: tuple[str, ...]) -> object:
    value: object = section.settings_class()()
    for name in path:
        value = getattr(value, name)
    return value.get_secret_value() if isinstance(value, pydantic.SecretStr) else value


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No FlexInfer variable from the calling shell; run where relative defaults are harmless."""
    for name in list(os.environ):
        if name.upper().startswith(PREFIXES):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sample.yaml").write_text("{}\n")
    return monkeypatch


def test_every_listed_variable_is_read_by_its_class(clean_env: pytest.MonkeyPatch) -> None:
    unread = []
    for section, variable in _all_variables():
        field = variable.owner.model_fields[variable.path[-1]]
        baseline = _read(section, variable.path)
        for name in variable.names:
            if not _is_read(clean_env, section, variable, field, name, baseline):
                unread.append(name)
    assert unread == [], f"documented variables that change nothing in their class: {unread}"


def _is_read(
    env: pytest.MonkeyPatch,
    section: Section,
    variable: Variable,
    field: pydantic.fields.FieldInfo,
    name: str,
    baseline: object,
) -> bool:
    """Whether setting ``name`` to some valid value changes the field's value."""
    for raw in _candidates(field):
        env.setenv(name, raw)
        try:
            value = _read(section, variable.path)
        except (pydantic.ValidationError, ValueError, FlexInferError):
            continue
        finally:
            env.delenv(name)
        if value != baseline:
            return True
    return False


def test_a_nested_group_is_read_through_the_service(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("FLEXINFER_BUS_URL", "redis://127.0.0.1:6399/3")
    clean_env.setenv("PROXY_MAX_QUEUE_SIZE", "17")
    clean_env.setenv("FLEXINFER_CONTROLLER_SLEEP_BUDGET_MB", "2048")
    from flexinfer_controller.settings import ControllerSettings
    from flexinfer_proxy.settings import ProxySettings

    proxy = ProxySettings()
    assert (proxy.bus.url, proxy.max_queue_size) == ("redis://127.0.0.1:6399/3", 17)
    assert ControllerSettings().sleep.budget_mb == 2048
    rows = render().splitlines()
    assert any(row.startswith("| `FLEXINFER_BUS_URL` |") for row in rows)
    assert any("`FLEXINFER_PROXY_MAX_QUEUE_SIZE` (or `PROXY_MAX_QUEUE_SIZE`)" in r for r in rows)


class _Partly(BaseSettings):
    """A group with one field documented and one not."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_TEST_", extra="ignore")

    documented: int = 1
    """Seconds of something, and why one."""

    bare: int = 2


def test_an_undocumented_field_is_found() -> None:
    found = {v.names[0]: v.description for v in variables(_Partly)}
    assert found == {
        "FLEXINFER_TEST_DOCUMENTED": "Seconds of something, and why one.",
        "FLEXINFER_TEST_BARE": "",
    }
