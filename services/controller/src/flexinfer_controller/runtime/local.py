"""The local runtime: engines are subprocesses of this machine, tracked by state files."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import functools
import hashlib
import logging
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexinfer_common.errors import NotFoundError
from flexinfer_controller.backends import LaunchSpec, SleepEndpoints
from flexinfer_controller.core.gpu import Hold
from flexinfer_controller.runtime import procs
from flexinfer_controller.runtime.adoption import Adopter
from flexinfer_controller.runtime.base import (
    LogRequest,
    Replica,
    ReplicaEvent,
    ReplicaListener,
    ReplicaState,
    Runtime,
)
from flexinfer_controller.runtime.devices import visibility_env
from flexinfer_controller.runtime.engine_env import engine_environment, trace_env
from flexinfer_controller.runtime.engine_http import post_once
from flexinfer_controller.runtime.local_ready import NotReady, ready_from_pipe, ready_over_http
from flexinfer_controller.runtime.logfile import open_log, seek_tail, stream_log, tail_text
from flexinfer_controller.runtime.statefile import EngineState, StateDir
from flexinfer_controller.settings import ControllerSettings

log = logging.getLogger(__name__)

RUNTIME_ID_ENV = "FLEXINFER_RUNTIME_ID"
"""Marks every engine with the runtime that started it, so it can be found without a state file."""
REPLICA_ID_ENV = "FLEXINFER_REPLICA_ID"


def runtime_id(data_dir: Path) -> str:
    """A stable id of a data dir: the same dir gives the same id across restarts."""
    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]


def replica_id(model: str) -> str:
    """``<namespace>_<name>-<random>``: unique, readable, safe as a file name."""
    return f"{model.replace('/', '_')}-{secrets.token_hex(4)}"


@dataclass
class _Engine:
    """One engine this runtime watches."""

    replica: Replica
    state: EngineState
    exit_task: asyncio.Task[int | None] | None = None
    ready_task: asyncio.Task[None] | None = None
    failure: str | None = None
    """Why the runtime killed it (startup timeout, bad ready line): the exit is a failure."""
    stopping: bool = False


class LocalRuntime(Runtime):
    """Engines as local processes (own session, logs and state files under data_dir)."""

    name = "local"
    sleeps = True

    def __init__(
        self,
        *,
        data_dir: Path,
        listener: ReplicaListener,
        startup_timeout_s: float = 300.0,
        stop_grace_s: float = 10.0,
        probe_timeout_s: float = 2.0,
        poll_interval_s: float = 1.0,
        ready_poll_interval_s: float = 0.25,
    ) -> None:
        self.id = runtime_id(data_dir)
        self._states = StateDir(data_dir / "engines")
        self._logs = data_dir / "logs"
        self._logs.mkdir(parents=True, exist_ok=True)
        self._listener = listener
        self._startup_timeout_s = startup_timeout_s
        self._stop_grace_s = stop_grace_s
        self._poll_interval_s = poll_interval_s
        self._ready_poll_s = ready_poll_interval_s
        self._probe_timeout_s = probe_timeout_s
        self._adopter = Adopter(
            self._states, self.id, RUNTIME_ID_ENV, REPLICA_ID_ENV, probe_timeout_s, stop_grace_s
        )
        self._engines: dict[str, _Engine] = {}
        self._exited: dict[str, Replica] = {}
        """The last replica of each model that exited: its log explains why."""
        self._background: set[asyncio.Task[None]] = set()

    @classmethod
    def from_settings(cls, settings: ControllerSettings, listener: ReplicaListener) -> LocalRuntime:
        """A LocalRuntime configured by the controller settings."""
        return cls(
            data_dir=settings.data_dir,
            listener=listener,
            startup_timeout_s=settings.engine_startup_timeout_s,
            stop_grace_s=settings.stop_grace_s,
            probe_timeout_s=settings.adopt_probe_timeout_s,
            poll_interval_s=settings.exit_poll_interval_s,
        )

    def log_path(self, replica: str) -> Path:
        """Where the replica's stdout and stderr go."""
        return self._logs / f"{replica}.log"

    async def adopt(self) -> list[Replica]:
        """Adopt healthy ready engines from state files; kill everything else of ours."""
        adopted = []
        for state in await self._adopter.run():
            replica = Replica(
                id=state.replica,
                model=state.model,
                generation=state.generation,
                state=ReplicaState.READY,
                ready_at=time.time(),
                url=state.url,
                pid=state.pid,
                started_at=state.started_at,
                gpus=state.gpus,
            )
            engine = _Engine(replica=replica, state=state)
            self._engines[state.replica] = engine
            self._watch_exit(engine)
            adopted.append(replica)
            log.info("adopted engine %s (pid %d) at %s", state.replica, state.pid, state.url)
        return adopted

    async def start(self, model: str, generation: int, spec: LaunchSpec) -> Replica:
        """Spawn one engine; readiness arrives on its ready pipe."""
        rid = replica_id(model)
        # A re-render for the port keeps neither the pinning nor the trace: taken before.
        gpus, trace_parent = spec.gpus, spec.trace_parent
        if spec.for_port is not None:
            spec = spec.for_port(procs.free_port("127.0.0.1"))
        if spec.http_ready is None:
            argv = [*spec.argv, spec.ready_fd_flag, str(procs.READY_FD)]
        else:
            argv = list(spec.argv)  # it reports nothing on the pipe: it is polled instead
        env = engine_environment(
            os.environ,
            {
                **spec.env,
                **visibility_env(gpus),
                **trace_env(trace_parent),
                RUNTIME_ID_ENV: self.id,
                REPLICA_ID_ENV: rid,
            },
        )
        pid, ready_fd = procs.spawn(argv, env, self.log_path(rid))
        started = time.time()
        state = EngineState(
            replica=rid,
            pid=pid,
            create_time=procs.create_time(pid),
            model=model,
            generation=generation,
            state="starting",
            runtime_id=self.id,
            served_name=spec.served_name,
            health_path=spec.health_path,
            started_at=started,
            gpus=gpus,
            template_hash=spec.template_hash,
        )
        try:
            self._states.write(state)
        except OSError:
            os.close(ready_fd)
            procs.signal_group(pid, signal.SIGKILL)
            await procs.wait_exit(pid, self._poll_interval_s)
            raise
        replica = Replica(
            rid, model, generation, ReplicaState.STARTING, pid=pid, started_at=started, gpus=gpus
        )
        engine = _Engine(replica=replica, state=state)
        self._engines[rid] = engine
        self._watch_exit(engine)
        assert engine.exit_task is not None
        exited, http = engine.exit_task, spec.http_ready
        waiting: Callable[[], Awaitable[str | NotReady | None]]
        if http is None:
            waiting = functools.partial(ready_from_pipe, ready_fd, self._startup_timeout_s, exited)
        else:
            os.close(ready_fd)
            waiting = functools.partial(
                ready_over_http, http, self._probe_timeout_s, self._ready_poll_s
            )
        engine.ready_task = asyncio.create_task(self._await_ready(engine, waiting))
        log.info("started engine %s (pid %d) for %s", rid, pid, model)
        return replica

    def _watch_exit(self, engine: _Engine) -> None:
        pid = engine.replica.pid
        assert pid is not None
        engine.exit_task = asyncio.create_task(procs.wait_exit(pid, self._poll_interval_s))
        engine.exit_task.add_done_callback(lambda task: self._on_exit(engine, task))

    async def _await_ready(
        self, engine: _Engine, waiting: Callable[[], Awaitable[str | NotReady | None]]
    ) -> None:
        # A factory, not a coroutine: a task cancelled before it runs leaves none unawaited.
        outcome = await waiting()
        if isinstance(outcome, NotReady):
            await self._fail(engine, outcome.reason)
        elif outcome is not None:
            self._mark_ready(engine, outcome)

    def _mark_ready(self, engine: _Engine, url: str) -> None:
        if engine.stopping or engine.replica.id not in self._engines:
            return
        engine.state = engine.state.model_copy(update={"state": "ready", "url": url})
        self._states.write(engine.state)
        engine.replica = dataclasses.replace(
            engine.replica, state=ReplicaState.READY, url=url, ready_at=time.time()
        )
        self._listener(ReplicaEvent("ready", engine.replica))

    async def _fail(self, engine: _Engine, reason: str) -> None:
        log.warning("engine %s failed: %s", engine.replica.id, reason)
        engine.failure = reason
        assert engine.exit_task is not None
        assert engine.replica.pid is not None
        await procs.terminate(engine.replica.pid, self._stop_grace_s, engine.exit_task)

    def _on_exit(self, engine: _Engine, task: asyncio.Task[int | None]) -> None:
        if task.cancelled():
            return
        code = task.result()
        self._engines.pop(engine.replica.id, None)
        self._exited[engine.replica.model] = engine.replica
        self._states.remove(engine.replica.id)
        if engine.ready_task is not None and not engine.ready_task.done():
            engine.ready_task.cancel()
        expected = engine.stopping and engine.failure is None
        message = engine.failure or f"exited with code {code}"
        if not expected:
            message += f"; log tail: {tail_text(self.log_path(engine.replica.id))}"
            log.warning("engine %s of %s: %s", engine.replica.id, engine.replica.model, message)
        self._listener(ReplicaEvent("exited", engine.replica, expected=expected, message=message))

    def renew(self, model: str, generation: int, template_hash: str) -> bool:
        """Engines of ``model`` started from ``template_hash`` serve ``generation`` now, in
        their state files too (sleeping ones included: they wake into it)."""
        renewed = False
        for engine in self._engines.values():
            state = engine.state
            if (
                not template_hash
                or engine.stopping
                or state.model != model
                or state.template_hash != template_hash
                or state.generation == generation
            ):
                continue
            engine.state = state.model_copy(update={"generation": generation})
            self._states.write(engine.state)
            engine.replica = dataclasses.replace(engine.replica, generation=generation)
            log.info("engine %s of %s serves generation %d unchanged", state.replica, model,
                     generation)  # fmt: skip
            renewed = True
        return renewed

    async def stop(self, replica_id: str) -> None:
        """SIGTERM the engine's group now; SIGKILL it after the grace period in the background."""
        engine = self._engines.get(replica_id)
        if engine is None or engine.stopping:
            return
        engine.stopping = True
        engine.replica = dataclasses.replace(engine.replica, state=ReplicaState.STOPPING)
        if engine.ready_task is not None:
            engine.ready_task.cancel()
        assert engine.exit_task is not None
        assert engine.replica.pid is not None
        task = asyncio.create_task(
            procs.terminate(engine.replica.pid, self._stop_grace_s, engine.exit_task)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def wait_stopped(self, replica_id: str, timeout_s: float) -> bool:
        """Wait for the replica's exit watcher to finish."""
        engine = self._engines.get(replica_id)
        if engine is None or engine.exit_task is None:
            return True
        done, _ = await asyncio.wait({engine.exit_task}, timeout=timeout_s)
        return bool(done)

    def list(self, model: str | None = None) -> list[Replica]:
        """Live replicas (not stopping, not sleeping), optionally of one model."""
        return [r for r in self._of(model) if r.state is not ReplicaState.SLEEPING]

    def sleepers(self, model: str | None = None) -> builtins.list[Replica]:
        """Sleeping replicas (not stopping), optionally of one model."""
        return [r for r in self._of(model) if r.state is ReplicaState.SLEEPING]

    def gpu_busy(self, model: str) -> bool:
        """Whether an engine of ``model`` runs, or stops and has not exited yet, awake."""
        return any(
            e.replica.model == model and e.replica.state is not ReplicaState.SLEEPING
            for e in self._engines.values()
        )

    def _of(self, model: str | None) -> builtins.list[Replica]:
        return [
            e.replica
            for e in self._engines.values()
            if not e.stopping and (model is None or e.replica.model == model)
        ]

    def gpu_holds(self) -> builtins.list[Hold]:
        """The GPUs of every engine until it exits (stopping ones too), but a sleeping one's:
        its sleep freed their memory (vLLM's level 1 frees weights and KV cache)."""
        return [
            Hold(e.replica.model, e.replica.generation, e.replica.gpus)
            for e in self._engines.values()
            if e.replica.gpus is not None and e.replica.state is not ReplicaState.SLEEPING
        ]

    async def sleep(
        self, replica_id: str, routes: SleepEndpoints, level: int, timeout_s: float
    ) -> Replica | None:
        """POST the engine's sleep route; SLEEPING once it answered 200 (a ``slept`` event)."""
        engine = self._engines.get(replica_id)
        replica = engine.replica if engine is not None else None
        if engine is None or replica is None or replica.state is not ReplicaState.READY:
            return None
        assert replica.url is not None  # READY replicas have one
        began = time.monotonic()
        problem = await post_once(replica.url + routes.sleep, timeout_s, {"level": str(level)})
        if problem is not None:
            log.warning("engine %s did not sleep: POST %s %s", replica_id, routes.sleep, problem)
            return None
        if not self._serving(engine):
            return None  # stopped or exited meanwhile
        self._set_state(engine, ReplicaState.SLEEPING)
        log.info("engine %s of %s sleeps (level %d)", replica_id, replica.model, level)
        took = time.monotonic() - began
        self._listener(ReplicaEvent("slept", engine.replica, took_s=took))
        return engine.replica

    async def wake(
        self, replica_id: str, routes: SleepEndpoints, timeout_s: float
    ) -> Replica | None:
        """POST the engine's wake route; READY again once it answered 200 (a ``ready`` event)."""
        engine = self._engines.get(replica_id)
        if engine is None or engine.stopping or engine.replica.state is not ReplicaState.SLEEPING:
            return None
        # STARTING while the weights come back: it holds its GPUs again from now on.
        self._set_state(engine, ReplicaState.STARTING)
        assert engine.replica.url is not None
        began = time.monotonic()
        problem = await post_once(engine.replica.url + routes.wake, timeout_s)
        if problem is not None:
            log.warning("engine %s did not wake: POST %s %s", replica_id, routes.wake, problem)
            return None
        if not self._serving(engine):
            return None
        self._set_state(engine, ReplicaState.READY)
        log.info("engine %s of %s woke", replica_id, engine.replica.model)
        took = time.monotonic() - began
        self._listener(ReplicaEvent("ready", engine.replica, took_s=took))
        return engine.replica

    def _serving(self, engine: _Engine) -> bool:
        return not engine.stopping and self._engines.get(engine.replica.id) is engine

    def _set_state(self, engine: _Engine, state: ReplicaState) -> None:
        """The replica's state, and its state file's: ``sleeping`` until it serves again, so
        that a restarted controller never adopts a half-woken engine as ready."""
        file_state = "ready" if state is ReplicaState.READY else "sleeping"
        engine.state = engine.state.model_copy(update={"state": file_state})
        self._states.write(engine.state)
        ready_at = time.time() if state is ReplicaState.READY else engine.replica.ready_at
        engine.replica = dataclasses.replace(engine.replica, state=state, ready_at=ready_at)

    def log_replicas(self, model: str) -> builtins.list[Replica]:
        """Live replicas of ``model``, newest first, then the last one that exited."""
        replicas = super().log_replicas(model)
        exited = self._exited.get(model)
        return replicas if exited is None else [*replicas, exited]

    def logs(self, replica: Replica, request: LogRequest) -> AsyncIterator[bytes]:
        """The replica's log file (only ever ``log_path`` of a replica this runtime ran)."""
        engine = self._engines.get(replica.id)
        if engine is None and self._exited.get(replica.model) != replica:
            raise NotFoundError(f"replica {replica.id} is not one of this runtime's")
        fh = open_log(self.log_path(replica.id), f"replica {replica.id}")
        if request.tail_lines is not None:
            seek_tail(fh, request.tail_lines)
        gone = asyncio.Event()
        if engine is None or engine.exit_task is None:
            gone.set()
        else:
            engine.exit_task.add_done_callback(lambda _: gone.set())
        return stream_log(self.log_path(replica.id), fh, follow=request.follow, gone=gone)

    async def close(self, *, stop_replicas: bool) -> None:
        """Stop all engines, or only starting and sleeping ones (ready ones stay for adoption;
        a sleeping one is never adopted, see ``Adopter``)."""
        engines = list(self._engines.values())
        for engine in engines:
            if stop_replicas or engine.replica.state is not ReplicaState.READY:
                await self.stop(engine.replica.id)
        waits = [e.exit_task for e in engines if e.stopping and e.exit_task is not None]
        if waits:
            await asyncio.wait(waits, timeout=self._stop_grace_s + 5)
        for stopper in list(self._background):
            await asyncio.wait({stopper}, timeout=1.0)
        pending: list[asyncio.Future[Any]] = []
        for engine in self._engines.values():
            for watcher in (engine.exit_task, engine.ready_task):
                if watcher is not None and not watcher.done():
                    watcher.cancel()
                    pending.append(watcher)
        await asyncio.gather(*pending, return_exceptions=True)
        self._engines.clear()
