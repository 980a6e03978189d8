"""File names made from free text (tuner specs, model names)."""
from __future__ import annotations


def file_stem(text: str) -> str:
    """``text`` as a file name: anything but letters, digits, ``-``, ``_`` and ``.`` made ``_``."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
