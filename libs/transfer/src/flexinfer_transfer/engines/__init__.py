"""FlexInfer's loader inside other inference engines (vLLM, SGLang).

Each engine's module imports that engine and is imported only where it runs; the vLLM
plugin entry point (``vllm_plugin``) imports nothing of vLLM until vLLM calls it.
"""
