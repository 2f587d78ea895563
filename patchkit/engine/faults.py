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
_wanted: Dict[str, int] = {}  # PATCHKIT_FAULT as read by the last reset (each engine run)


def _targets() -> Dict[str, int]:
    out: Dict[str, int] = {}
    for spec in os.environ.get("PATCHKIT_FAULT", "").split(","):
        spec = spec.strip()
        if not spec:
            continue
        point, _, count = spec.partition(":")
        out[point.strip()] = int(count) if count.strip().isdigit() else 1
    return out


def fault(point: str) -> None:
    """Die here if ``PATCHKIT_FAULT`` asks for it; otherwise count the visit and return."""
    targets = _wanted
    if not targets:
        return
    _seen[point] = _seen.get(point, 0) + 1
    if targets.get(point) == _seen[point]:
        os.kill(os.getpid(), signal.SIGKILL)


def reset() -> None:
    """Forget the visits counted so far (each engine run counts from zero) and read
    ``PATCHKIT_FAULT`` once for the run: a 2000-file apply reaches ~7000 points."""
    _seen.clear()
    _wanted.clear()
    _wanted.update(_targets())
