"""The directories engines may load LoRA adapters from: denied everywhere else.

A LocalPath adapter makes an engine open the files at a path its author chose. Locally
the engine runs as the controller's user, so any file that user can read would do; the
controller therefore loads a LocalPath adapter only from inside a root, and tells the
engines that check paths themselves (the reference engine's ``--lora-root``) the same
roots. vLLM checks no path: for it the controller's check is the only one.

The roots are the operator's (``FLEXINFER_CONTROLLER_LORA_ROOTS``, none by default) plus
where the runtime itself puts adapters: locally the controller's adapter cache, on
Kubernetes the base Model's volume.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

ROOTS_SETTING = "FLEXINFER_CONTROLLER_LORA_ROOTS"
PathLike = os.PathLike[str] | str


@dataclass(frozen=True, slots=True)
class AdapterRoots:
    """Directories (as the engines see them) that LocalPath adapters may lie in."""

    operator: tuple[PurePosixPath, ...] = ()
    """The operator's roots (``FLEXINFER_CONTROLLER_LORA_ROOTS``)."""
    runtime: tuple[PurePosixPath, ...] = ()
    """Where the runtime puts adapters it fetched (its cache) or mounts (the Model's volume)."""
    follow_links: bool = False
    """Resolve symlinks before comparing: the engines share the controller's filesystem
    (local mode), so a link out of a root is seen as leaving it, as the engine sees it."""

    @classmethod
    def of(
        cls,
        operator: Iterable[PathLike],
        runtime: Iterable[PathLike],
        *,
        follow_links: bool = False,
    ) -> AdapterRoots:
        """Roots from paths (duplicates of an operator root are dropped from ``runtime``)."""
        ops = _unique(operator)
        return cls(ops, tuple(p for p in _unique(runtime) if p not in ops), follow_links)

    @property
    def all(self) -> tuple[PurePosixPath, ...]:
        """Every root, the operator's first: what an engine that checks paths is given."""
        return (*self.operator, *self.runtime)

    @property
    def texts(self) -> tuple[str, ...]:
        """Every root as text, for the engines' ``--lora-root``."""
        return tuple(str(root) for root in self.all)

    def refusal(self, path: PurePosixPath) -> str | None:
        """Why ``path`` (absolute, normalised) may not be loaded; None when it may."""
        if any(self._inside(path, root) for root in self.all):
            return None
        setting = f"{ROOTS_SETTING} (paths separated by ':')"
        if not self.operator:
            return (
                f"{path} is not inside an adapter root, and no adapter roots are configured: "
                f"LocalPath adapters are denied by default, set {setting} to the directories "
                "engines may load adapters from"
            )
        listed = ", ".join(str(r) for r in self.all)
        return (
            f"{path} is outside every adapter root ({listed}): move the adapter into one, "
            f"or add its directory to {setting}"
        )

    def _inside(self, path: PurePosixPath, root: PurePosixPath) -> bool:
        if self.follow_links:
            path = PurePosixPath(os.path.realpath(path))
            root = PurePosixPath(os.path.realpath(root))
        return path.is_relative_to(root)


def _unique(paths: Iterable[PathLike]) -> tuple[PurePosixPath, ...]:
    return tuple(dict.fromkeys(PurePosixPath(os.fspath(p)) for p in paths))
