"""The clear error an engine module raises where its engine is not installed."""

from __future__ import annotations

from flexinfer_transfer.optional_packages import missing_package


def require_engine(module: str, install: str) -> None:
    """Raise ImportError naming what to install when ``module`` cannot be imported."""
    if missing_package(module) is not None:
        raise ImportError(
            f"{module} is not installed: FlexInfer's {module} loader runs inside {module}; "
            f"install it with `{install}`",
            name=module,
        )
