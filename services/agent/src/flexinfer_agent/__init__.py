"""FlexInfer agent service."""
