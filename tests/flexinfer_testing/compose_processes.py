"""compose.yaml's FlexInfer services as local processes: the same commands, environment,
start order and healthchecks, without a Docker engine.

The translation is mechanical, so that compose.yaml is what is tested: ``host:port`` of a
compose service becomes ``127.0.0.1:<a free port>``, listen hosts become loopback, a named
volume's mount path becomes a directory of the test's own, ``${VAR}`` becomes the test's
secret, and the bus and store URLs point at the test's Redis prefix and PostgreSQL database.
Images are not built: each service runs the ``CMD`` of its Dockerfile (its compose
``command`` where it has one) with this interpreter, where ``pip install`` put the same
packages.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flexinfer_testing.dockerfiles import stage_instructions
from flexinfer_testing.ports import free_port
from flexinfer_testing.repo import repo_root
from flexinfer_testing.services import postgres_database, require_redis
from flexinfer_testing.stack import delete_redis_keys, stop_process

ROOT = repo_root()
EXTERNAL = {"redis", "postgres", "prometheus", "grafana"}
"""Not FlexInfer processes: the machine's Redis and PostgreSQL stand in for the first two."""
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?[?-][^}]*)?\}")


def load_compose() -> dict[str, Any]:
    """compose.yaml, parsed (YAML merge keys resolved)."""
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return compose


def start_order(services: dict[str, Any]) -> list[str]:
    """The FlexInfer services in an order that honours every depends_on."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order or name in EXTERNAL:
            return
        for dep in services[name].get("depends_on", {}):
            visit(dep)
        order.append(name)

    for name in services:
        visit(name)
    return order


def image_command(svc: dict[str, Any]) -> list[str]:
    """The service's compose ``command``, else its Dockerfile's CMD (of the built target)."""
    if "command" in svc:
        return list(svc["command"])
    cmds: dict[str | None, list[str]] = {}
    for name, steps in stage_instructions(ROOT / svc["build"]["dockerfile"]):
        cmd = cmds.get(steps[0][1].split()[0], [])  # a stage inherits its parent's CMD
        for word, args in steps:
            if word == "CMD":
                cmd = yaml.safe_load(args)
        cmds[name] = cmd
    return cmds[svc["build"].get("target")] if "target" in svc["build"] else cmd


def swap_path(text: str, target: str, local: Path) -> str:
    """``target`` (a container path) as ``local`` wherever it starts a path in ``text``,
    a ``file://`` URL's included."""
    return re.sub(rf"(?:(?<=://)|(?<![\w/.])){re.escape(target)}(?=/|$|\s)", str(local), text)


@dataclass
class ComposeProcesses:
    """The translation context and the processes started under it."""

    root: Path
    secrets: dict[str, str]
    overrides: dict[str, str]
    compose: dict[str, Any] = field(default_factory=load_compose)
    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def port(self, service: str, port: int) -> int:
        """The local port standing for ``service:port``."""
        return self.ports.setdefault((service, port), free_port())

    def _owner(self, service: str) -> str:
        """Whose network ``service`` is on (network_mode: service:X shares X's ports)."""
        mode: str = self.compose["services"][service].get("network_mode", "")
        return mode.removeprefix("service:") or service

    def _paths(self, service: str) -> dict[str, Path]:
        """Mount path -> local directory: named volumes under the test's directory, bind
        mounts as translated copies (their files name container paths too)."""
        mounts = {}
        for volume in self.compose["services"][service].get("volumes", []):
            source, target = volume.split(":")[:2]
            mounts[target] = self._bind(source) if source.startswith(".") else self.root / source
        return mounts

    def _bind(self, source: str) -> Path:
        copy = self.root / "binds" / source.removeprefix("./").replace("/", "_")
        if not copy.exists():
            copy.mkdir(parents=True)
            named = {
                target: self.root / src
                for svc in self.compose["services"].values()
                for src, target in (v.split(":")[:2] for v in svc.get("volumes", []))
                if not src.startswith(".")
            }
            for path in (ROOT / source).iterdir():
                text = path.read_text(encoding="utf-8")
                for target, local in named.items():
                    text = swap_path(text, target, local)
                (copy / path.name).write_text(text, encoding="utf-8")
        return copy

    def addresses(self, value: str) -> str:
        """``service:port`` in ``value`` as the local address that stands for it."""
        names = "|".join(re.escape(n) for n in self.compose["services"])

        def address(m: re.Match[str]) -> str:
            return f"127.0.0.1:{self.port(self._owner(m.group(1)), int(m.group(2)))}"

        return re.sub(rf"\b({names}):(\d+)\b", address, value)

    def translate(self, service: str, value: str) -> str:
        """One string of compose.yaml as the local process sees it."""
        value = INTERPOLATION.sub(lambda m: self.secrets[m.group(1)], value)
        value = self.addresses(value)
        for target, local in sorted(self._paths(service).items(), key=lambda kv: -len(kv[0])):
            value = swap_path(value, target, local)
        return value

    def environment(self, service: str) -> dict[str, str]:
        """The service's compose environment, translated, with the test's overrides."""
        env: dict[str, str] = {}
        for key, raw in self.compose["services"][service].get("environment", {}).items():
            value = self.translate(service, str(raw))
            if key.endswith("_HOST"):
                value = "127.0.0.1"
            elif key.endswith("_PORT"):
                value = str(self.port(self._owner(service), int(value)))
            env[key] = value
        return env | self.overrides

    def command(self, service: str) -> list[str]:
        """The service's command, translated, run by this interpreter."""
        cmd = [
            self.translate(service, part)
            for part in image_command(self.compose["services"][service])
        ]
        return [sys.executable, *cmd[1:]] if cmd[0] == "python" else cmd

    def start(self, service: str, base_env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start one service with its log in the test's directory."""
        for local in self._paths(service).values():
            local.mkdir(parents=True, exist_ok=True)
        log = (self.root / f"{service}.log").open("ab")
        proc = subprocess.Popen(
            self.command(service), env={**base_env, **self.environment(service)},
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        self.procs[service] = proc
        return proc

    def up(self, healthy_timeout_s: float, one_shot_timeout_s: float) -> None:
        """Start every FlexInfer service as compose does: each as soon as what it
        depends_on is healthy (long-running) or exited 0 (one-shot, ``restart: "no"``),
        services without a dependency between them at once."""
        services = self.compose["services"]
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("FLEXINFER_")}
        pending = start_order(services)
        done: set[str] = set()
        deadlines: dict[str, float] = {}
        while pending or deadlines:
            for name in [n for n in pending if self._needs(n) <= done]:
                pending.remove(name)
                self.start(name, base_env)
                one_shot = services[name].get("restart") == "no"
                timeout = one_shot_timeout_s if one_shot else healthy_timeout_s
                deadlines[name] = time.monotonic() + timeout
            for name, deadline in list(deadlines.items()):
                if self._started(name):
                    done.add(name)
                    del deadlines[name]
                else:
                    assert time.monotonic() < deadline, f"{name} not up: {self.log(name)}"
            time.sleep(0.2)  # the polling interval, not a wait for an outcome

    def _needs(self, service: str) -> set[str]:
        """The FlexInfer services ``service`` depends_on."""
        return set(self.compose["services"][service].get("depends_on", {})) - EXTERNAL

    def _started(self, service: str) -> bool:
        """A one-shot exited 0, or a long-running service passes its healthcheck."""
        proc = self.procs[service]
        if self.compose["services"][service].get("restart") == "no":
            code = proc.poll()
            assert code in (None, 0), f"{service} exited {code}: {self.log(service)}"
            return code == 0
        assert proc.poll() is None, f"{service} exited {proc.returncode}: {self.log(service)}"
        return self.healthy(service)

    def healthy(self, service: str) -> bool:
        """Whether the service's compose healthcheck (translated) passes now."""
        test = self.compose["services"][service]["healthcheck"]["test"]
        assert test[0] == "CMD", f"{service}: only exec-form healthchecks translate"
        # The container's own loopback port: the port that stands for it here.
        check = [
            re.sub(r"127\.0\.0\.1:(\d+)", lambda m: self._local(service, m), t) for t in test[1:]
        ]
        check = [sys.executable, *check[1:]] if check[0] == "python" else check
        return subprocess.run(check, capture_output=True, check=False).returncode == 0

    def _local(self, service: str, m: re.Match[str]) -> str:
        return f"127.0.0.1:{self.port(self._owner(service), int(m.group(1)))}"

    def log(self, service: str) -> str:
        """The tail of a service's output."""
        return (self.root / f"{service}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """Stop every process, last started first."""
        for proc in reversed(list(self.procs.values())):
            stop_process(proc)


@contextmanager
def compose_stack(root: Path, name: str, env: Mapping[str, str]) -> Iterator[ComposeProcesses]:
    """compose.yaml's services as processes (not started yet: call ``up``), on the
    machine's Redis under a fresh prefix and a fresh PostgreSQL database ``flexinfer_<name>``,
    with fresh secrets and ``env`` on top; stopped, and their bus keys deleted, on exit."""
    redis_url = require_redis()
    prefix = f"{name}-{uuid.uuid4().hex[:8]}:"
    with postgres_database(f"flexinfer_{name}") as database:
        procs = ComposeProcesses(
            root=root,
            secrets={
                "FLEXINFER_ADMIN_TOKEN": secrets.token_hex(24),
                "FLEXINFER_REGISTRY_P2P_TOKEN": secrets.token_hex(24),
                "POSTGRES_PASSWORD": secrets.token_hex(24),
                "GRAFANA_ADMIN_PASSWORD": secrets.token_hex(24),
            },
            overrides={
                "FLEXINFER_BUS_URL": redis_url,
                "FLEXINFER_BUS_STREAM_PREFIX": prefix,
                "FLEXINFER_STORE_URL": database,
                **env,
            },
        )
        try:
            yield procs
        finally:
            procs.stop()
            delete_redis_keys(redis_url, prefix)
