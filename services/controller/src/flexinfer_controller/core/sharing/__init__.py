"""GPU sharing (issue 13): the reconcile's shared-GPU hook and the arbiter behind it.

``hook`` is the seam the reconcile core asks (``SharedGPUHook.arbitrate``); ``arbiter``
implements it for ``spec.gpu.shared`` groups over the pure decision in ``decide``, with
the anti-thrashing constants of ``policy`` and the demand the proxies report in ``demand``.
Every time is read from an injected ``Clock`` (``clock``), so traces run on a simulated one.
"""

from flexinfer_controller.core.sharing.hook import (
    EngineChange,
    EngineKind,
    Hold,
    NoSharing,
    SharedGPUHook,
    SharedVerdict,
    Sharing,
)

__all__ = [
    "EngineChange",
    "EngineKind",
    "Hold",
    "NoSharing",
    "SharedGPUHook",
    "SharedVerdict",
    "Sharing",
]
