"""FlexInfer scheduler service."""
