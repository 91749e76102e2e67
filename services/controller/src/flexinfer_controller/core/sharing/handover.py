"""A swap's winner starts only once the engines of the Models it evicted are gone or asleep.

Where the runtime pins GPUs (local mode), the winner cannot be placed while a loser's
engine holds the memory, so placement already waits. Where it does not (Kubernetes: the
scheduler and the device plugin place pods), the winner would be placed at once and its pod
created while the loser drains; it would then wait on the device plugin for the GPU the
loser still holds, or, on a time-sliced GPU, run out of memory beside it.

So the planner asks the runtime whether each loser's engines still hold their GPU
(``Runtime.gpu_busy``: running, draining or stopping, not asleep) and holds the winner at 0
replicas, phase Pending with reason ``WaitingForSwap``, until none does. It is asked at
every reconcile of the winner (level-triggered); a loser's engine exiting or falling asleep
reconciles the winner at once (``SharedArbiter.engine_event``), and the seed's 30 s recheck
is the backstop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from flexinfer_controller.core.sharing.hook import Hold, SharedVerdict, Sharing

RECHECK_S = 30.0
"""Look again this soon even if no engine event came (the seed's requeue)."""


def hand_over(shared: Sharing, busy: Callable[[str], bool]) -> Sharing:
    """``shared``, or 0 replicas with a ``WaitingForSwap`` verdict while an engine of a
    Model its swap evicted still holds the GPU."""
    if shared.replicas <= 0 or not shared.waits_for:
        return shared
    holding = sorted(key for key in shared.waits_for if busy(key))
    if not holding:
        return shared
    group = shared.group.group_name if shared.group is not None else None
    message = (
        f"shared GPU group {group!r} is handed to it: waiting for the engines of "
        f"{', '.join(holding)} to drain and stop (or sleep) before its own starts"
    )
    verdict = SharedVerdict(Hold.QUEUED, "WaitingForSwap", message, 0.0, group)
    recheck = RECHECK_S if shared.recheck_s is None else min(shared.recheck_s, RECHECK_S)
    return replace(shared, replicas=0, verdict=verdict, recheck_s=recheck)
