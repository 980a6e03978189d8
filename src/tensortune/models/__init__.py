"""Whole deep-learning models: the built-in PyTorch zoo, and the reference runners (PyTorch eager, ONNX Runtime), ONNX export and latency protocol used to compare compiled models against them."""
