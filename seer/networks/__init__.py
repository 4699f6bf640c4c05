"""Whole networks: their convolution calls (PyTorch, ONNX), their predicted time, their profiling on a GPU."""
