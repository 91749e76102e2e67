"""FlexInfer weight loading: tensor manifests and the loader strategy chain."""
