"""AdapterLoader: one load of an engine's weights through the LoadStrategyChain.

It binds an EngineAdapter to the chain's target: the skeleton is built only when a peer
strategy needs memory to READ into (a file load never pays for a second copy), dropped when
the chain reinitialises the target after a failed try, and the winning strategy's tensors
are applied and post-processed by the engine.
"""

from __future__ import annotations

import dataclasses

from torch import nn

from flexinfer_transfer.engine_adapter import EngineAdapter
from flexinfer_transfer.strategy import LoadContext
from flexinfer_transfer.strategy_chain import LoadReport, LoadStrategyChain


class AdapterTarget:
    """The LoadTarget (and a peer transport's module holder) of an adapter's loads."""

    def __init__(self) -> None:
        self.adapter: EngineAdapter | None = None
        self._module: nn.Module | None = None
        self.builds = 0
        """Skeletons built so far (a reinitialisation shows as one more)."""

    @property
    def module(self) -> nn.Module:
        """The skeleton a peer writes into, built on first use."""
        if self._module is None:
            if self.adapter is None:
                raise RuntimeError("no engine adapter is bound to this load target")
            self._module = self.adapter.build_skeleton()
            self.builds += 1
        return self._module

    def reinitialize(self) -> None:
        """Forget a possibly half-written skeleton; the next use builds a fresh one."""
        self._module = None

    def bind(self, adapter: EngineAdapter | None) -> None:
        """Serve ``adapter``'s load (None: between loads, holding nothing)."""
        self.adapter = adapter
        self._module = None


@dataclasses.dataclass
class AdapterLoader:
    """A strategy chain, its target and the context every load of one engine starts from."""

    chain: LoadStrategyChain
    target: AdapterTarget
    context: LoadContext
    """Model directory, device, identity fields; ``target`` is filled in per load."""

    def load(self, adapter: EngineAdapter) -> LoadReport:
        """Load through the chain, then let the engine adopt and post-process the weights."""
        self.target.bind(adapter)
        ctx = dataclasses.replace(self.context, target=self.target, target_mutated=False)
        try:
            report = self.chain.run(ctx)
            adapter.apply_weights(report.tensors)
            adapter.post_process()
        finally:
            self.target.bind(None)
        return report
