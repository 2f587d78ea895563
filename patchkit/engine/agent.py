"""Entry point on a remote host: one request JSON on stdin, one result JSON on stdout.
SIGHUP and SIGPIPE are ignored, so a dropped SSH connection loses only the result."""

from __future__ import annotations

import json
import signal
import sys

from ..errors import UsageError
from . import run


def main() -> int:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    raw = sys.stdin.buffer.read()
    try:
        request = json.loads(raw.decode("utf-8", "surrogateescape"))
    except ValueError as exc:
        result = {"format": 1, "op": None, "ok": False, "dry_run": False, "recovered": [],
                  "fixes": [], "status": None,
                  "error": UsageError("the engine request is not valid JSON: %s" % exc).to_dict()}
    else:
        result = run(request)
    data = (json.dumps(result) + "\n").encode("utf-8")
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except (BrokenPipeError, OSError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
