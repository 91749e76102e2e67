"""FlexInfer registry service."""
