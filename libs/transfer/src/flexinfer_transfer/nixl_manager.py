"""NixlTransferManager: one NIXL agent per worker; the only module that imports ``nixl``.

It registers memory (one registration per contiguous pool by default, see pools.py),
exports and loads agent metadata, and READs remote regions into local ones, waiting for
completion with a deadline so a dead peer becomes an error, never a hang. On these CPU
machines UCX moves DRAM between processes through CMA (``process_vm_readv``), which needs
ptrace permission between the processes; without it UCX falls back to tcp (below 1 GB/s).
If ``UCX_TLS`` is set it must include ``tcp``: ``sm,self`` alone fails to connect.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flexinfer_transfer.optional_packages import missing_package
from flexinfer_transfer.pools import Region, pools

METADATA_POLL_S = 0.005
"""Poll interval while a peer's metadata is on its way (it takes about 0.1 s locally)."""


class NixlError(RuntimeError):
    """A NIXL operation failed (connect, register, transfer) or timed out."""


def nixl_missing() -> str | None:
    """Why nixl cannot be used here, or None."""
    return missing_package("nixl")


@dataclass(frozen=True)
class NixlSettings:
    """How the agent runs (TransferSettings documents the defaults)."""

    progress_thread: bool = False
    """Off: on 2 cores UCX's progress thread halves DRAM READ throughput (6-7 GB/s
    without, about half with); transfers here are driven by polling instead."""
    backends: tuple[str, ...] = ("UCX",)
    transfer_timeout_s: float = 60.0
    """Longest one READ may take before the peer counts as gone."""
    listen_port: int | None = None
    """Run NIXL's metadata listener on this port (MX_METADATA_PORT + device id, 5555 in
    ModelExpress): peers then fetch this agent's metadata from it, as targets of the
    WorkerService (k8s-service) path do, and this agent can fetch theirs. None: metadata
    travels out of band (the registry's GetMetadata)."""
    metadata_timeout_s: float = 30.0
    """Longest a metadata fetch from a peer's listener may take."""


@dataclass
class Registration:
    """Memory registered with the agent (deregistered by ``release``)."""

    regions: list[Region]
    mem_type: str
    handle: Any = field(repr=False, default=None)


class NixlTransferManager:
    """A worker's NIXL agent: registration, metadata, READ transfers, notifications."""

    def __init__(self, agent_name: str, settings: NixlSettings | None = None) -> None:
        missing = nixl_missing()
        if missing is not None:
            raise NixlError(f"{missing}: install flexinfer-transfer[nixl] for peer transfers")
        # Imported here: the package works without the nixl extra (RdmaStrategy then says
        # it is unavailable); nixl ships no type information.
        from nixl._api import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            nixl_agent,
            nixl_agent_config,
            nixl_thread_sync_t,
        )

        self.settings = settings or NixlSettings()
        self.name = agent_name
        listen = self.settings.listen_port
        config = nixl_agent_config(
            enable_prog_thread=self.settings.progress_thread,
            enable_listen_thread=listen is not None,
            listen_port=listen or 0,
            backends=list(self.settings.backends),
            # STRICT: a source's pump thread polls the agent while other threads register,
            # connect or read; NIXL's default without a listener is no locking at all.
            sync_mode=nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT,
        )
        self._agent = nixl_agent(agent_name, config)
        self._registrations: list[Registration] = []

    def register(
        self, regions: Sequence[Region], mem_type: str, *, pooled: bool = True
    ) -> Registration:
        """Register ``regions`` (merged into contiguous pools unless ``pooled`` is off)."""
        chosen = pools(regions) if pooled else [r for r in regions if r.size]
        descs = [(r.addr, r.size, r.device_id, "") for r in chosen]
        try:
            handle = self._agent.register_memory(descs, mem_type)
        except Exception as exc:
            raise NixlError(f"registering {len(descs)} {mem_type} regions failed: {exc}") from exc
        registration = Registration(chosen, mem_type, handle)
        self._registrations.append(registration)
        return registration

    def release(self, registration: Registration) -> None:
        """Deregister memory registered by ``register``."""
        if registration in self._registrations:
            self._registrations.remove(registration)
            self._agent.deregister_memory(registration.handle)

    def metadata(self) -> bytes:
        """This agent's metadata (connection info and registered memory keys)."""
        return bytes(self._agent.get_agent_metadata())

    def connect(self, metadata: bytes) -> str:
        """Load a peer's metadata; returns the peer agent's name."""
        try:
            name = self._agent.add_remote_agent(metadata)
        except Exception as exc:
            raise NixlError(f"loading the peer's NIXL metadata failed: {exc}") from exc
        return name.decode() if isinstance(name, bytes) else str(name)

    def fetch_metadata(self, remote_agent: str, endpoint: str) -> str:
        """Load ``remote_agent``'s metadata from its listener at ``host:port`` (needs this
        agent's own listener: the answer arrives there)."""
        if self.settings.listen_port is None:
            raise NixlError("fetching a peer's metadata needs listen_port set on this agent")
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise NixlError(f"bad NIXL metadata endpoint {endpoint!r} (want host:port)")
        self._agent.fetch_remote_metadata(remote_agent, host, int(port))
        deadline = time.monotonic() + self.settings.metadata_timeout_s
        while not self._agent.check_remote_metadata(remote_agent):
            if time.monotonic() > deadline:
                raise NixlError(f"no metadata from {remote_agent} at {endpoint}")
            time.sleep(METADATA_POLL_S)
        return remote_agent

    def disconnect(self, remote_agent: str) -> None:
        """Forget a peer (and close its connection)."""
        with contextlib.suppress(Exception):  # already gone: nothing to release
            self._agent.remove_remote_agent(remote_agent)

    def read(
        self,
        remote_agent: str,
        local: Sequence[Region],
        remote: Sequence[Region],
        mem_type: str,
        notification: bytes = b"",
    ) -> None:
        """READ each ``remote`` region into the same-sized ``local`` one and wait."""
        if len(local) != len(remote):
            raise ValueError("a READ pairs as many local regions as remote ones")
        if not local:
            return
        local_descs = self._agent.get_xfer_descs(
            [(r.addr, r.size, r.device_id) for r in local], mem_type
        )
        remote_descs = self._agent.get_xfer_descs(
            [(r.addr, r.size, r.device_id) for r in remote], mem_type
        )
        try:
            handle = self._agent.initialize_xfer(
                "READ", local_descs, remote_descs, remote_agent, notification
            )
        except Exception as exc:
            raise NixlError(f"preparing a READ from {remote_agent} failed: {exc}") from exc
        try:
            self._wait(handle, remote_agent)
        finally:
            self._agent.release_xfer_handle(handle)

    def _wait(self, handle: Any, remote_agent: str) -> None:
        deadline = time.monotonic() + self.settings.transfer_timeout_s
        state = self._agent.transfer(handle)
        while state == "PROC":
            if time.monotonic() > deadline:
                raise NixlError(
                    f"READ from {remote_agent} still running after "
                    f"{self.settings.transfer_timeout_s:.0f}s"
                )
            state = self._agent.check_xfer_state(handle)
        if state != "DONE":
            raise NixlError(f"READ from {remote_agent} failed ({state})")

    def notifications(self) -> dict[str, list[bytes]]:
        """Notifications received since the last call, by peer agent name."""
        return {k: list(v) for k, v in self._agent.get_new_notifs().items()}

    def notify(self, remote_agent: str, message: bytes) -> None:
        """Send a notification to a connected peer."""
        self._agent.send_notif(remote_agent, message)

    def close(self) -> None:
        """Deregister everything still registered."""
        for registration in list(self._registrations):
            self.release(registration)
