"""FlexInfer engine service."""
