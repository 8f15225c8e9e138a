"""Every environment variable monobuild's compiler reads, in one place."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "MONOBUILD_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$MONOBUILD_CACHE_DIR``, else ``$XDG_CACHE_HOME/monobuild``, else ``~/.cache/monobuild``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "monobuild"
