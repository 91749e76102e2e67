"""Adoption at startup: keep healthy engines a previous controller left, kill the rest."""

from __future__ import annotations

import asyncio
import logging

import httpx

from flexinfer_controller.runtime import procs
from flexinfer_controller.runtime.statefile import EngineState, StateDir

log = logging.getLogger(__name__)


class Adopter:
    """Decides, for each state file and marked process, whether to adopt or kill it."""

    def __init__(
        self,
        states: StateDir,
        runtime_id: str,
        runtime_env: str,
        replica_env: str,
        probe_timeout_s: float,
        grace_s: float,
    ) -> None:
        self._states = states
        self._runtime_id = runtime_id
        self._runtime_env = runtime_env
        self._replica_env = replica_env
        self._probe_timeout_s = probe_timeout_s
        self._grace_s = grace_s

    async def run(self) -> list[EngineState]:
        """The engines to adopt; every other engine of this runtime is killed and forgotten."""
        keep: list[EngineState] = []
        async with httpx.AsyncClient(timeout=self._probe_timeout_s, trust_env=False) as client:
            for state in self._states.read_all():
                verdict = await self._judge(state, client)
                if verdict == "adopt":
                    keep.append(state)
                    continue
                log.info("not adopting engine %s (pid %d): %s", state.replica, state.pid, verdict)
                if verdict.startswith("kill"):
                    await self._kill(state.pid)
                self._states.remove(state.replica)
        kept = {s.replica for s in keep}
        marked = await asyncio.to_thread(procs.pids_with_env, self._runtime_env, self._runtime_id)
        for pid, env in marked:
            if env.get(self._replica_env) not in kept:
                log.info("killing orphan engine pid %d (no state file)", pid)
                await self._kill(pid)
        return keep

    async def _judge(self, state: EngineState, client: httpx.AsyncClient) -> str:
        if state.runtime_id != self._runtime_id:
            return "forget: state file of another runtime"
        if not procs.is_alive(state.pid, state.create_time):
            procs.reap(state.pid)  # it may be a zombie child of this very process
            return "forget: process is gone (or its pid was reused)"
        env = procs.environ_of(state.pid)
        if env.get(self._runtime_env) != self._runtime_id:
            return "forget: process does not carry this runtime's marker"
        if state.state == "sleeping":
            # Its sleep's bookkeeping (host-RAM budget, second timeout) died with the old
            # controller, and a sleeping engine's /readyz says 503 whether it is healthy or
            # wedged: a stop costs one cold start, an unaccounted sleeper host RAM for good.
            return "kill: it was asleep (or waking)"
        if state.state != "ready" or not state.url:
            return "kill: it was still starting"
        try:
            response = await client.get(state.url + state.health_path)
        except httpx.HTTPError as exc:
            return f"kill: {state.health_path} failed: {exc!r}"
        if response.status_code != 200:
            return f"kill: {state.health_path} answered {response.status_code}"
        return "adopt"

    async def _kill(self, pid: int) -> None:
        exit_wait = asyncio.ensure_future(procs.wait_exit(pid, 0.2))
        try:
            await procs.terminate(pid, self._grace_s, exit_wait)
        finally:
            if not exit_wait.done():
                exit_wait.cancel()
                await asyncio.gather(exit_wait, return_exceptions=True)
