"""The built-in quantizer: a safetensors checkpoint (HF layout) to FP8 or GGUF, on the CPU.

``python -m flexinfer_controller.quantize`` (the quantize Job's command, from the
controller's image) and local mode's pre-start step run the same ``run``. FP8 writes
compressed-tensors checkpoints vLLM loads; GGUF writes one file llama.cpp loads. AWQ, GPTQ
and EXL2 need calibration on a GPU: they are refused, and a Model asks for them with its
own ``spec.quantize.image``.
"""
