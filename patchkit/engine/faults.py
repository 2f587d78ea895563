"""Fault injection for the crash tests.

``PATCHKIT_FAULT="<point>:<n>"`` makes the process SIGKILL itself right before the n-th time
(1-based, default 1) it reaches ``<point>``; several specs may be joined with commas. The points
are listed in docs/state.md. A SIGKILL is the honest model of a crash: no ``finally`` runs, no
buffer is flushed, so recovery must work from what is on disk alone.
"""

from __future__ import annotations

import os
import signal
from typing import Dict

POINTS = ("backup", "journal", "write", "rename", "action", "verify", "state", "cleanup")

_seen: Dict[str, int] = {}


def fault(point: str) -> None:
    """Die here if ``PATCHKIT_FAULT`` asks for it; otherwise count the visit (while it is set)."""
    wanted = os.environ.get("PATCHKIT_FAULT", "")
    if not wanted:
        return
    _seen[point] = _seen.get(point, 0) + 1
    for spec in wanted.split(","):
        name, _, count = spec.strip().partition(":")
        if name.strip() == point and _seen[point] == (int(count) if count.strip().isdigit() else 1):
            os.kill(os.getpid(), signal.SIGKILL)


def reset() -> None:
    """Forget the visits counted so far: each engine run counts from zero."""
    _seen.clear()
