"""FlexInfer controller service."""
