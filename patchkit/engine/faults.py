"""Fault injection for the crash tests: ``PATCHKIT_FAULT="<point>:<n>[,...]"`` SIGKILLs the
process right before the n-th time (default 1) it reaches ``<point>`` (docs/state.md)."""

from __future__ import annotations

import os
import signal
import threading
from typing import Dict

POINTS = ("backup", "journal", "write", "rename", "action", "verify", "state", "cleanup")

_seen: Dict[str, int] = {}
_counting = threading.Lock()  # a point reached by several threads at once (``write``)


def fault(point: str) -> None:
    """Die here if ``PATCHKIT_FAULT`` asks for it; otherwise count the visit (while it is set)."""
    wanted = os.environ.get("PATCHKIT_FAULT", "")
    if not wanted:
        return
    with _counting:
        _seen[point] = seen = _seen.get(point, 0) + 1
    for spec in wanted.split(","):
        name, _, count = spec.strip().partition(":")
        if name.strip() == point and seen == (int(count) if count.strip().isdigit() else 1):
            os.kill(os.getpid(), signal.SIGKILL)


def reset() -> None:
    """Forget the visits counted so far: each engine run counts from zero."""
    _seen.clear()
