"""Where patchkit keeps what it downloads: the one cache directory (docs/cli.md, "Caches")."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$PATCHKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/patchkit`` (if absolute), else
    ``~/.cache/patchkit``."""
    own = os.environ.get("PATCHKIT_CACHE_DIR")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "patchkit"


def upstream_dir() -> Path:
    """``$PATCHKIT_UPSTREAM``, else ``upstream/`` in the cache directory (docs/upstream.md)."""
    env = os.environ.get("PATCHKIT_UPSTREAM")
    return Path(env).expanduser() if env else cache_dir() / "upstream"
