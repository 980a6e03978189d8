"""The benchmark suite behind ``python -m bench``."""
