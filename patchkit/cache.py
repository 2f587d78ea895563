"""Where patchkit keeps what it downloads: the one cache directory (docs/cli.md, "Caches").

patchkit keeps no computation cache. The cache directory holds only the SGLang release store
of :mod:`patchkit.upstream` (wheels downloaded from PyPI and the releases built from them), as
pip keeps its downloads. Standard library only: any module may ask where it is.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$PATCHKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/patchkit``, else ``~/.cache/patchkit``.

    An empty or relative ``XDG_CACHE_HOME`` is ignored, as the XDG base directory
    specification asks.
    """
    own = os.environ.get("PATCHKIT_CACHE_DIR")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "patchkit"


def upstream_dir() -> Path:
    """The upstream directory (docs/upstream.md): ``$PATCHKIT_UPSTREAM`` (a managed directory
    or the user's SGLang clone), else ``upstream/`` in the cache directory."""
    env = os.environ.get("PATCHKIT_UPSTREAM")
    return Path(env).expanduser() if env else cache_dir() / "upstream"
