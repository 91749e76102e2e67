"""Publisher: a source worker's metadata in the registry, kept fresh by heartbeats.

A background thread publishes (PublishMetadata) until the registry accepts it, then sends
UpdateStatus(READY) every ``interval_s`` (MX_HEARTBEAT_INTERVAL_SECS, 30 s) so the
registry's reaper (MX_HEARTBEAT_TIMEOUT_SECS, 90 s) keeps the worker listed. ``stop``
sends UpdateStatus(STALE) so targets stop choosing it at once. No failure is fatal: a
publish or heartbeat that fails is logged and retried, and a heartbeat the registry
rejects (it forgot the worker: restarted, or reaped it) publishes again. A registry started
with tokens needs its P2P token (``token``); one that refuses it (UNAUTHENTICATED,
PERMISSION_DENIED) is logged at WARNING with the reason and retried once per heartbeat
interval, as no quicker retry can succeed.

Tracing: a publication carries the ``traceparent`` of the span current where ``start``
was called (the load that made this worker a source), and ``stop``'s STALE update that of
its caller; heartbeats are background work and start no trace (they carry none).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from opentelemetry import context as otel_context

from flexinfer_common.grpc_tracing import trace_metadata
from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer._generated import p2p_pb2
from flexinfer_transfer.directory import SourceManifest
from flexinfer_transfer.p2p_stub import AUTH_CODES, p2p_stub, registry_metadata
from flexinfer_transfer.source_identity import identity_to_proto

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublisherSettings:
    """Timing of publication and heartbeats."""

    interval_s: float = 30.0
    """MX_HEARTBEAT_INTERVAL_SECS: a third of the reaper's 90 s timeout, so two lost
    heartbeats in a row still leave the worker listed."""
    retry_s: float = 1.0
    """First wait after a failed publish; doubles up to ``interval_s``."""
    call_timeout_s: float = 10.0
    """Per RPC: the registry answers from memory or one store round trip."""


def descriptors(manifest: SourceManifest) -> list[p2p_pb2.TensorDescriptor]:
    """The manifest's tensors as TensorDescriptor messages."""
    return [
        p2p_pb2.TensorDescriptor(
            name=t.name, addr=t.addr, size=t.size, device_id=t.device_id, dtype=t.dtype
        )
        for t in manifest.tensors
    ]


def worker_metadata(
    manifest: SourceManifest,
    worker_rank: int,
    status: p2p_pb2.SourceStatus = p2p_pb2.SOURCE_STATUS_READY,
) -> p2p_pb2.WorkerMetadata:
    """The WorkerMetadata a NIXL source publishes (central metadata mode). The tensors
    go into ``tensor_source`` and, as modelexpress does, the legacy ``tensors`` field too,
    which servers predating the ``source_payload`` oneof read."""
    tensors = descriptors(manifest)
    return p2p_pb2.WorkerMetadata(
        worker_rank=worker_rank,
        nixl_metadata=manifest.agent_metadata,
        agent_name=manifest.agent_name,
        accelerator=manifest.accelerator,
        status=status,
        tensors=tensors,
        tensor_source=p2p_pb2.TensorSourceMetadata(tensors=tensors),
    )


class Publisher:
    """Publishes one worker and heartbeats it until ``stop``."""

    def __init__(
        self,
        address: str,
        identity: SourceIdentity,
        worker_id: str,
        worker: p2p_pb2.WorkerMetadata,
        settings: PublisherSettings | None = None,
        load: Callable[[], float] | None = None,
        token: str | None = None,
    ) -> None:
        self.address = address
        self._auth = registry_metadata(token)
        """``authorization`` with the registry's P2P token (none without one)."""
        self.load = load
        """Reads in flight now (a PeerSource's leases), sent with each READY heartbeat as
        ``source_load`` for load-aware selection."""
        self.identity = identity
        self.worker_id = worker_id
        self.worker = worker
        self.settings = settings or PublisherSettings()
        self.mx_source_id = ""
        """Set once the registry accepted the publication."""
        self.published = threading.Event()
        self.heartbeats = 0
        self.failures = 0
        """Publish or heartbeat calls that failed (and were retried)."""
        self.auth_refused = False
        """The last call was refused for its token (UNAUTHENTICATED, PERMISSION_DENIED)."""
        self._stop = threading.Event()
        self._origin = otel_context.get_current()
        """The context ``start`` was called in: publications are traced under it."""
        self._thread = threading.Thread(target=self._run, name="mx-publisher", daemon=True)

    def start(self) -> None:
        """Publish and heartbeat in the background."""
        self._origin = otel_context.get_current()
        self._thread.start()

    def stop(self) -> None:
        """Stop heartbeating and mark the worker STALE (best effort)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.mx_source_id:
            try:
                self._update(p2p_pb2.SOURCE_STATUS_STALE)
            except grpc.RpcError as exc:
                log.warning("could not mark %s STALE: %s", self.worker_id, _brief(exc))

    def _run(self) -> None:
        wait = self.settings.retry_s
        while not self._stop.is_set():
            if not self.published.is_set() and not self._try(self._publish):
                # A refused token stays refused until someone fixes the configuration:
                # retry it once per heartbeat interval, not at the doubling pace.
                self._stop.wait(self.settings.interval_s if self.auth_refused else wait)
                wait = min(wait * 2, self.settings.interval_s)
                continue
            wait = self.settings.retry_s
            if self._stop.wait(self.settings.interval_s):
                return
            self._try(self._heartbeat)

    def _try(self, call: Callable[[], bool]) -> bool:
        try:
            done = call()
        except grpc.RpcError as exc:
            self.failures += 1
            self.auth_refused = _code(exc) in AUTH_CODES
            extra = {"worker_id": self.worker_id, "reason": _brief(exc)}
            if self.auth_refused:
                log.warning(
                    "the registry at %s refused to let %s publish (%s): give the engine "
                    "the registry's P2P token; retrying every %.0fs",
                    self.address,
                    self.worker_id,
                    _brief(exc),
                    self.settings.interval_s,
                    extra=extra,
                )
            else:
                log.warning(
                    "publishing %s to %s failed, retrying: %s",
                    self.worker_id,
                    self.address,
                    _brief(exc),
                    extra=extra,
                )
            return False
        self.auth_refused = False
        return done

    def _publish(self) -> bool:
        request = p2p_pb2.PublishMetadataRequest(
            identity=identity_to_proto(self.identity), worker=self.worker, worker_id=self.worker_id
        )
        with grpc.insecure_channel(self.address) as channel:
            reply = p2p_stub(channel).PublishMetadata(
                request,
                timeout=self.settings.call_timeout_s,
                metadata=trace_metadata(self._auth, context=self._origin),
            )
        if not reply.success:
            log.warning("the registry refused %s: %s", self.worker_id, reply.message)
            return False
        self.mx_source_id = reply.mx_source_id
        self.published.set()
        return True

    def _heartbeat(self) -> bool:
        if self._update(p2p_pb2.SOURCE_STATUS_READY):
            self.heartbeats += 1
            return True
        log.warning("the registry forgot %s; publishing again", self.worker_id)
        self.published.clear()
        return self._publish()

    def _update(self, status: p2p_pb2.SourceStatus) -> bool:
        request = p2p_pb2.UpdateStatusRequest(
            mx_source_id=self.mx_source_id,
            worker_rank=self.worker.worker_rank,
            status=status,
            worker_id=self.worker_id,
        )
        if self.load is not None and status == p2p_pb2.SOURCE_STATUS_READY:
            request.source_load = float(self.load())
        with grpc.insecure_channel(self.address) as channel:
            # The calling thread's span: stop()'s caller, or none on the heartbeat thread.
            reply = p2p_stub(channel).UpdateStatus(
                request,
                timeout=self.settings.call_timeout_s,
                metadata=trace_metadata(self._auth),
            )
        return bool(reply.success)


def _code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    return exc.code() if isinstance(exc, grpc.Call) else None


def _brief(exc: grpc.RpcError) -> str:
    code = _code(exc)
    detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    return f"{code.name if code else 'error'}: {detail}"
