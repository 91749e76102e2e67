"""FlexInfer proxy service."""
