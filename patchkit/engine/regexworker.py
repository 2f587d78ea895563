"""The worker process of regex greps (engine/checks.py starts it with ``python -I -S -c`` and
this module's source, so it runs the same on a host that has the engine only in memory).

Per job a JSON header line (``pattern``, ``size``, ``timeout``), then ``size`` bytes of the
file; one JSON line back: ``{"lines": [...]}`` (1-based numbers of matching lines) or
``{"failed": "..."}``. The job's own alarm ends the worker at the time limit (SIGALRM's
default action). Standard library only, and nothing of patchkit: it runs in a bare interpreter."""

from __future__ import annotations

import json
import re
import signal
import sys
from typing import Any, Dict

LINE = re.compile(r"[^\n]*\n|[^\n]+")


def answer(job: Dict[str, Any], data: bytes) -> Dict[str, Any]:
    """One job's answer."""
    try:
        rx = re.compile(job["pattern"])
        text = data.decode("utf-8", "surrogateescape")
        return {"lines": [i for i, ln in enumerate(LINE.findall(text), 1) if rx.search(ln)]}
    except Exception as exc:
        return {"failed": "%s: %s" % (type(exc).__name__, exc)}


def main() -> None:
    read = sys.stdin.buffer
    for head in iter(read.readline, b""):
        job = json.loads(head)
        data = read.read(job["size"])
        signal.setitimer(signal.ITIMER_REAL, job["timeout"])
        out = answer(job, data)
        signal.setitimer(signal.ITIMER_REAL, 0)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
