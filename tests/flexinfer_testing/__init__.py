"""Helpers for FlexInfer's cross-service tests: real stacks as subprocesses, real servers."""
