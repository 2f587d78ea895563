"""The wire contract between the client and the engine (docs/design.md, "Engine request" and
"Engine result"): its format number, ops, the names of outcomes and states, the check table,
the result envelope and the reversal of a FILE record. Standard library only and importing
nothing else of patchkit, so the engine (shipped to hosts), the catalog, the request builder,
the CLI, the fleet, its action plugin and the agent all take these from here."""

from __future__ import annotations

import math
import os
from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional, Tuple

#: The engine request and result format this patchkit speaks (both ends must agree).
FORMAT = 1
OPS = ("apply", "rollback", "status", "verify", "undo")
#: the ops that write to the target (a dry run of one does not); a fleet rolls these out
WRITES = ("apply", "rollback", "undo")
#: A fix's ``rollback.strategy``.
STRATEGIES = ("restore", "reverse")
#: The root a target's path names, the one a fix uses unless it says another, where SGLang is.
PRIMARY_ROOT = "sglang"

# -- a fix's outcome in the result of apply, rollback or verify (its ``outcome`` key)
APPLIED, ALREADY_APPLIED, UPGRADED = "applied", "already-applied", "upgraded"
ROLLED_BACK, VERIFIED, FAILED = "rolled-back", "verified", "failed"
WOULD_APPLY, WOULD_UPGRADE, WOULD_ROLL_BACK = "would-apply", "would-upgrade", "would-roll-back"
NOT_APPLIED, NOT_NEEDED, PRESENT_UNRECORDED = "not-applied", "not-needed", "present-unrecorded"
UNDONE, WOULD_UNDO = "undone", "would-undo"  # the undo op: put back as before the last change
OUTCOMES = (APPLIED, ALREADY_APPLIED, WOULD_APPLY, UPGRADED, WOULD_UPGRADE, ROLLED_BACK,
            WOULD_ROLL_BACK, VERIFIED, FAILED, NOT_APPLIED, NOT_NEEDED, PRESENT_UNRECORDED, UNDONE, WOULD_UNDO)
#: Per op, the outcomes that changed a target's files, and what a dry run says instead.
CHANGED: Mapping[str, Tuple[str, ...]] = MappingProxyType(
    {"apply": (APPLIED, UPGRADED), "rollback": (ROLLED_BACK,), "undo": (UNDONE,)})
WOULD_CHANGE: Mapping[str, Tuple[str, ...]] = MappingProxyType(
    {"apply": (WOULD_APPLY, WOULD_UPGRADE), "rollback": (WOULD_ROLL_BACK,), "undo": (WOULD_UNDO,)})
#: The outcome a fix gets from an op that changed the target (a fleet host's state too).
DONE: Mapping[str, str] = MappingProxyType({"apply": APPLIED, "rollback": ROLLED_BACK, "undo": UNDONE})

# -- a fix's state in a status result (its ``state`` key)
DRIFTED, PARTLY_PRESENT, OUTDATED, LOST = "drifted", "partly-present", "outdated", "lost"
STATES = (APPLIED, DRIFTED, NOT_APPLIED, PARTLY_PRESENT, PRESENT_UNRECORDED, OUTDATED,
          NOT_NEEDED, LOST)
#: States that need someone's attention (``status --exit-code``, a fleet not converged).
UNHEALTHY = frozenset((DRIFTED, PARTLY_PRESENT, OUTDATED, LOST))
#: States of a fix the target records (it has a version there).
RECORDED = (APPLIED, OUTDATED, DRIFTED, LOST)

# -- declared checks (docs/manifest.md)
#: Check kinds -> (required keys, optional keys), besides ``kind``, ``name`` and ``timeout``;
#: grep needs exactly one of count/present.
CHECK_KEYS: Mapping[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = MappingProxyType({
    "grep": (("path", "pattern"), ("root", "regex", "count", "present")),
    "sha256": (("path", "sha256"), ("root",)),
    "python-syntax": (("path",), ("root",)),
    "bash-syntax": (("path",), ("root",)),
    "python-import": (("module",), ("root", "sys_path")),
    "python-script": (("script",), ("root", "args")),
    "command": (("argv",), ("root", "expect_exit")),
    # git checks: exactly one of commit/fix (git-contains), of tag/commit (git-descends-from)
    "git-contains": ((), ("root", "commit", "fix", "present")),
    "git-descends-from": ((), ("root", "tag", "commit")),
})
CHECK_KINDS = tuple(CHECK_KEYS)
#: Seconds a check may run unless its ``timeout`` says otherwise.
CHECK_TIMEOUTS: Mapping[str, float] = MappingProxyType({
    kind: 60.0 if kind in ("grep", "sha256", "python-syntax", "bash-syntax") else 300.0
    for kind in CHECK_KINDS
})
_EXTRA_DEFAULTS: Mapping[str, Dict[str, Any]] = {
    "grep": {"regex": False}, "python-script": {"args": ()}, "command": {"expect_exit": 0},
    "git-contains": {"present": True},
}
#: Defaults the client writes into each CHECK of a request, so the engine never guesses.
CHECK_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    kind: MappingProxyType(dict(_EXTRA_DEFAULTS.get(kind, {}), timeout=CHECK_TIMEOUTS[kind]))
    for kind in CHECK_KINDS
})


def grep_holds(check: Mapping[str, Any], hits: int) -> bool:
    """A grep check's verdict from the number of lines that match: exactly ``count`` of them
    when it gives one, else some (``present``, the default) or none."""
    if check.get("count") is not None:
        return hits == int(check["count"])
    return (hits > 0) == bool(check.get("present", True))


def is_timeout(value: Any) -> bool:
    """Whether ``value`` is a check's ``timeout``: a number of seconds above 0, not infinite."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and 0 < value < math.inf)


# -- the result
def result_envelope(request: Any, error: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The result of ``request`` before the op has run (``ok`` false): the engine fills it in;
    with ``error`` it is the whole answer of a run that failed (the agent's too)."""
    raw = request if isinstance(request, dict) else {}
    return {"format": FORMAT, "op": raw.get("op"), "ok": False,
            "dry_run": bool(raw.get("dry_run", False)), "recovered": [], "fixes": [],
            "status": None, "error": error}


def no_sglang(path: str, remedy: str) -> str:
    """The message for a root ``sglang`` at ``path`` holding no SGLang tree; ``remedy`` says what
    to point the target at (an engine's status and the client's target resolution say it alike)."""
    return ("no `sglang` package found in %s: looked for %s (an SGLang checkout) and %s (an "
            "installed package); %s" % (path, os.path.join(path, "python", "sglang") + os.sep,
                                        os.path.join(path, "sglang", "__init__.py"), remedy))


# -- FILE records
#: The ``op`` of a FILE record: what the change does to its file.
FILE_OPS = ("modify", "create", "delete")
#: A change undone: the op it becomes, and each hunk line's side (``+``, ``-``, `` ``).
REVERSED_OP: Mapping[str, str] = MappingProxyType({"create": "delete", "delete": "create",
                                                   "modify": "modify"})
REVERSED_SIDE: Mapping[str, str] = MappingProxyType({"+": "-", "-": "+", " ": " "})


def reversed_record(rec: Dict[str, Any]) -> Dict[str, Any]:
    """A FILE record (hunks as ``body``) undone: sides swapped, creations become deletions (the
    engine's ``FileChange.reversed`` does the same to a parsed record, by the same tables)."""
    op = REVERSED_OP.get(rec["op"], rec["op"])
    hunks = [{"body": _flipped(h["body"]),
              "old_start": h["new_start"], "old_count": h["new_count"],
              "new_start": h["old_start"], "new_count": h["old_count"]} for h in rec["hunks"]]
    return dict(rec, op=op, hunks=hunks)


def _flipped(body: str) -> str:
    parts = body.split("\n")  # on "\n" only, as the engine's hunks split text
    last = parts.pop()
    lines = [part + "\n" for part in parts] + ([last] if last else [])
    return "".join(REVERSED_SIDE.get(line[0], line[0]) + line[1:] for line in lines)
