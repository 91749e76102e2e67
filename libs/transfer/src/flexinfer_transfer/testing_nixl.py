"""A NIXL donor process for tests and benchmarks: a small torch model served to peers.

``python -m flexinfer_transfer.testing_nixl --registry HOST:PORT --model NAME --worker-id W``
builds ``PeerModel`` from ``--seed``, serves it through a NixlSource, publishes it to the
registry with a heartbeat, prints ``READY <mx_source_id>`` and serves until stdin closes;
then it marks itself STALE and prints ``NOTIFIED <count>`` (pull notifications received).
With ``--listen-port P`` it instead runs NIXL's metadata listener on P and serves the
WorkerService (the k8s-service path, no registry) and prints ``SERVING <grpc port>``.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer.nixl_manager import NixlSettings, NixlTransferManager
from flexinfer_transfer.nixl_source import NixlSource
from flexinfer_transfer.publisher import Publisher, PublisherSettings, worker_metadata
from flexinfer_transfer.worker_service import ServedWorker, serve_worker


class PeerModel(nn.Module):
    """Tied embedding/head, ``layers`` linear blocks, a norm and a non-persistent buffer."""

    def __init__(self, hidden: int = 64, layers: int = 2, vocab: int = 96) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("rope", torch.arange(hidden, dtype=torch.float32), persistent=False)


def seeded(module: nn.Module, seed: int) -> nn.Module:
    """``module`` with every parameter and buffer drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor.copy_(torch.randn(tensor.shape, generator=gen).to(tensor.dtype))
    return module


def identity(model: str) -> SourceIdentity:
    """The identity test donors publish under."""
    return SourceIdentity(mx_version="0.7.0", model_name=model, dtype="float32")


def main(argv: list[str] | None = None) -> int:
    """Serve a seeded PeerModel until stdin closes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--registry", default="")
    parser.add_argument("--listen-port", type=int, default=0)
    parser.add_argument("--model", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--per-tensor", action="store_true", help="register each tensor")
    args = parser.parse_args(argv)
    module = seeded(PeerModel(args.hidden, args.layers), args.seed)
    settings = NixlSettings(listen_port=args.listen_port or None)
    source = NixlSource(
        NixlTransferManager(f"donor-{args.worker_id}", settings),
        module,
        pooled=not args.per_tensor,
        accelerator="cpu",
    )
    if args.listen_port:
        serve_worker_service(source, args)
    else:
        publish(source, args)
    source.close()
    print(f"NOTIFIED {sum(source.notifications.values())}", flush=True)
    return 0


def publish(source: NixlSource, args: argparse.Namespace) -> None:
    """Publish to the registry with heartbeats until stdin closes, then STALE."""
    publisher = Publisher(
        args.registry,
        identity(args.model),
        args.worker_id,
        worker_metadata(source.manifest(), worker_rank=0),
        PublisherSettings(retry_s=0.1),
    )
    publisher.start()
    publisher.published.wait()
    print(f"READY {publisher.mx_source_id}", flush=True)
    sys.stdin.read()
    publisher.stop()


def serve_worker_service(source: NixlSource, args: argparse.Namespace) -> None:
    """Serve the WorkerService until stdin closes."""
    served = ServedWorker(
        identity(args.model).mx_source_id,
        args.worker_id,
        0,
        source.manifest(),
        metadata_endpoint=f"127.0.0.1:{args.listen_port}",
    )
    server, port = serve_worker(served, "127.0.0.1")
    print(f"SERVING {port}", flush=True)
    sys.stdin.read()
    server.stop(None)


if __name__ == "__main__":
    sys.exit(main())
