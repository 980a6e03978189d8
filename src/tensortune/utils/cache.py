"""Where tensortune keeps what it measures or makes once per machine (hardware profiles,
transferred models, the user's pre-tuned table): one root for all of them."""
from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming the cache's root folder.
CACHE_ENV = "TENSORTUNE_CACHE"
#: The root when the variable is not set.
DEFAULT_CACHE_ROOT = Path("~/.cache/tensortune")


def cache_root() -> Path:
    """``$TENSORTUNE_CACHE``, else ``~/.cache/tensortune`` (user-expanded)."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else DEFAULT_CACHE_ROOT.expanduser()
