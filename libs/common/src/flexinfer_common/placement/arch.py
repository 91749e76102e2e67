"""Which GPU architectures each backend runs on, as plain data.

The controller's backend plugins know this (``supports_arch``), but placement lives in a
library that services import, never the other way round; so the facts are a table here,
given to ``ArchSupport`` as input. A backend, or a vendor of a backend, that the table does
not name documents no limit: it runs on any architecture.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_SM = re.compile(r"sm_(\d+)")


@dataclass(frozen=True, slots=True)
class VendorArchRule:
    """The architectures of one vendor a backend runs on."""

    exact: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    min_sm: int | None = None
    """NVIDIA: the lowest ``sm_NN`` compute capability; an arch not spelled ``sm_NN`` passes."""

    def allows(self, arch: str) -> bool:
        """Whether ``arch`` (lower case) is one of this rule's."""
        if self.min_sm is not None:
            match = _SM.fullmatch(arch)
            return match is None or int(match.group(1)) >= self.min_sm
        return arch in self.exact or arch.startswith(self.prefixes)


@dataclass(frozen=True, slots=True)
class ArchSupport:
    """backend -> vendor -> rule; ``supports`` answers the seed's LookupGPUArchSupport."""

    rules: Mapping[str, Mapping[str, VendorArchRule]] = field(default_factory=dict)

    def supports(self, backend: str, vendor: str, arch: str) -> bool:
        """Whether ``backend`` runs on ``arch`` of ``vendor`` (unknown to the table: yes)."""
        rule = self.rules.get(backend, {}).get(vendor)
        return rule is None or rule.allows(arch)


def default_arch_support() -> ArchSupport:
    """The documented limits: vLLM needs CUDA 7.0+, or ROCm MI200/MI300/MI350/RX 7900/9000."""
    vllm = {
        "nvidia": VendorArchRule(min_sm=70),
        "amd": VendorArchRule(
            exact=frozenset({"gfx90a", "gfx942", "gfx950"}), prefixes=("gfx110", "gfx120")
        ),
    }
    return ArchSupport({"vllm": vllm})
