"""FlexInfer controller service: reconciles declared Models onto a runtime."""
