"""The read-only ops: status (what is applied, drifted, or present without a record) and
verify (re-run the verification of applied fixes). Neither writes a target file."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from ..errors import NotApplied, PatchkitError, VerificationFailed
from . import presence
from .checks import CheckContext, failure_lines, run_check
from .fsops import read_bytes, stat_stamp
from .hunks import sha256_bytes
from .request import FixSpec, Request, check_patch_paths
from .store import Store, last_writers
from .workspace import Workspace


def status(req: Request, store: Store) -> Dict[str, Any]:
    state = store.read_state()
    recorded = {f["name"]: f for f in state.get("fixes", [])}
    out: List[Dict[str, Any]] = []
    check_patch_paths(req.roots, req.fixes)
    ws = Workspace(req.roots)
    last = last_writers(state)
    for spec in req.fixes:
        rec = recorded.get(spec.name)
        out.append(_recorded(ws, rec, last) if rec else _detect(ws, spec))
    listed = {s.name for s in req.fixes}
    out.extend(_recorded(ws, rec, last) for rec in state.get("fixes", []) if rec["name"] not in listed)
    return {"state_root": req.state_root.path, "fixes": out, "journal": store.read_journal()}


def _recorded(ws: Workspace, rec: Dict[str, Any], last: Dict[Any, Dict[str, Any]]) -> Dict[str, Any]:
    """A file is ``ok`` when it holds what the last fix to touch it wrote (maybe a later fix)."""
    files = []
    for f in rec.get("files", []):
        key = (f["root"], f["path"])
        writer = last.get(key, f)
        expected = writer.get("after_sha256")
        if expected is not None and _stat_holds(ws, key, writer.get("stat")):
            files.append({"root": f["root"], "path": f["path"], "state": "ok"})
            continue
        current = ws.entry(*key).current
        if sha256_bytes(current) == expected:
            state = "ok"
        elif current is None:
            state = "missing"
        else:
            state = "drifted"
        files.append({"root": f["root"], "path": f["path"], "state": state})
    drifted = any(f["state"] != "ok" for f in files)
    return {"name": rec["name"], "state": "drifted" if drifted else "applied",
            "version": rec.get("version"), "applied_at": rec.get("applied_at"), "files": files}


def _stat_holds(ws: Workspace, key: Tuple[str, str], stamp: Any) -> bool:
    """The file still has the stat stamp recorded when patchkit wrote it (docs/state.md): it
    holds the recorded bytes without being read."""
    if not isinstance(stamp, list) or ws.has(*key):
        return False
    try:
        return stat_stamp(os.stat(ws.roots.resolve(*key))) == stamp
    except (OSError, PatchkitError):
        return False


def _detect(ws: Workspace, spec: FixSpec) -> Dict[str, Any]:
    """Is an unrecorded fix's change already in the files (``presence.detect``)?"""
    found = presence.detect(spec.files, ws.read)
    files = []
    if found.state != presence.NOT_APPLIED:
        for (root, path), whole in found.files:
            current = ws.entry(root, path).current
            files.append({"root": root, "path": path,
                          "state": "ok" if whole else ("missing" if current is None else "drifted")})
    return {"name": spec.name, "state": found.state, "version": spec.version, "applied_at": None,
            "files": files}


def verify(req: Request, store: Store) -> List[Dict[str, Any]]:
    recorded = {f["name"]: f for f in store.read_state().get("fixes", [])}
    missing = [s.name for s in req.fixes if s.name not in recorded]
    if missing:
        raise NotApplied("fix %s is not applied in %s; apply it before verifying it"
                         % (", ".join(missing), req.state_root.path), fixes=missing)

    def disk(root: str, path: str) -> Optional[bytes]:
        return read_bytes(req.roots.resolve(root, path))

    out, failures = [], []
    for spec in req.fixes:
        ctx = CheckContext(spec.name, req.roots, req.python, spec.scripts, disk)
        results = [run_check(check, ctx) for check in spec.verification]
        failures.extend(dict(r, fix=spec.name) for r in results if not r["ok"])
        out.append({"name": spec.name, "version": recorded[spec.name].get("version"),
                    "outcome": "verified" if all(r["ok"] for r in results) else "failed",
                    "files": [], "preconditions": [], "verification": results})
    if failures:
        raise VerificationFailed("%d verification check(s) failed (nothing was changed):\n%s"
                                 % (len(failures), failure_lines(failures)), failures=failures, fixes=out)
    return out
