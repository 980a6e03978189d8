"""tensortune: auto-tuning of tensor programs on Apache TVM (see README.md and docs/ARCHITECTURE.md).

Importing the package loads nothing else: each layer (``tensortune.tuners``, ``tensortune.models``,
...) is imported on its own, and its heavy libraries only when used.
"""
