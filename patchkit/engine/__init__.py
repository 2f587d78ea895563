"""The part of patchkit that runs next to the target's files (standard library only).
``run(request) -> result`` never raises for an expected failure: the result carries the error,
so a local and a remote target fail alike."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import Any, Dict, List, Optional

from ..errors import InternalError, PatchkitError, Stop, TargetError, Terminated, stopping_on_signals
from . import faults
from .contract import PRIMARY_ROOT, WRITES, no_sglang, result_envelope
from .paths import PLAIN
from .request import parse_request
from .store import Store

__all__ = ["run", "left_behind"]


def run(request: Dict[str, Any]) -> Dict[str, Any]:
    with stopping_on_signals():  # the write phase rolls back, as on SIGINT
        return _run(request)


def _run(request: Dict[str, Any]) -> Dict[str, Any]:
    faults.reset()
    result = result_envelope(request)
    store: Optional[Store] = None
    try:
        req = parse_request(request)
        result["tree"] = _tree_identity(req.state_root.path, req.roots)
        store = Store(req.state_root.path)
        store.check()
        _refuse_without_sglang(req)
        writes = req.op in WRITES and not req.dry_run
        with store.locked(req.lock_timeout, write=writes) as held:
            # each op's modules load only with it (a status never loads the transaction)
            if held and store.left_behind():  # a killed run's traces: finish or undo it
                from .recovery import recover

                result["recovered"] = recover(store, req.roots)
            if req.op == "apply" and req.sync:  # what a sync leaves behind: recorded, on roots
                # not given; read before it runs, so a failed sync says it too (it writes
                # nothing on those roots either way)
                result["unseen"] = [{"name": rec.name, "roots": lacking}
                                    for rec, lacking in ((r, r.lacking(req.roots))
                                                         for r in store.read_state().fixes)
                                    if lacking]
            module = importlib.import_module(_MODULES[req.op], __name__)
            result["status" if req.op == "status" else "fixes"] = getattr(module, req.op)(req, store)
            _name_files(req, result.get("fixes") or [])
            if store.undo_txn:  # what an undo names (docs/state.md, "Undo")
                result["txn"] = store.undo_txn
            if store.undoes:  # the change an undo put back: a fleet's wave pins preflight's
                result["undoes"] = store.undoes
        if req.op in ("apply", "status"):  # the wheel installs the fixes are in (summary)
            from .record import installs

            result["installed"] = {name: {"dist": "sglang", "version": found.version}
                                   for name, found in installs(req.roots).items()}
            result["release"] = _releases(req, result["installed"])
        result["ok"] = True
    except PatchkitError as err:
        result["error"] = err.to_dict()
        # a failure before the transaction wrote anything left the target untouched; one after
        # put back what it wrote (a fleet's wave host says which: refused, or rolled back)
        result["wrote"] = store is not None and store.wrote
    except Stop as stop:  # the transaction's own handler has put the files back by now
        result["error"] = _terminated(request, stop.signum,
                                      store is not None and store.committed is not None).to_dict()
    except Exception as exc:  # a bug: report it with its traceback instead of crashing the client
        import traceback  # here: only a bug's report needs it

        result["error"] = InternalError(
            "internal error in the patchkit engine: %s: %s" % (type(exc).__name__, exc),
            traceback=traceback.format_exc()).to_dict()
    finally:  # the process a regex or syntax check started, if any (none without the module)
        checks = sys.modules.get(__name__ + ".checks")
        if checks is not None:
            checks.close_worker()
    return result


def _name_files(req: Any, fixes: List[Dict[str, Any]]) -> None:
    """A file of an installed package gets ``where``, ``root:path`` as it lies in its root
    (``sglang:sglang/x.py``; ``path`` stays the patch's ``python/sglang/x.py``)."""
    for fix in fixes:
        for f in fix.get("files") or ():
            shown = req.roots.where(f.get("root", ""), f.get("path", ""))
            if shown != "%s:%s" % (f.get("root"), f.get("path")):
                f["where"] = shown


def _releases(req: Any, installed: Dict[str, Any]) -> Dict[str, Optional[str]]:
    """The SGLang release of the ``sglang`` root, as the release precondition reads it (its
    installed wheel's version, else the version file or the release tag of HEAD)."""
    from .variants import detect_release

    out: Dict[str, Optional[str]] = {}
    for root in req.roots:
        if root.name == PRIMARY_ROOT:
            out[root.name] = (installed.get(root.name) or {}).get("version") \
                or detect_release(root, git=req.git)[0]
    return out
def _tree_identity(path: str, roots: Any = ()) -> Dict[str, Any]:
    """Which tree this run's state root is, however a host reached it: the machine, the
    directory's device and inode, its real path (a fleet preflight finds two inventory hosts
    that reach one tree by it); and, under ``roots``, the same of every root (two hosts whose
    own trees share a serve directory)."""
    machine = ""
    for source in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(source, "rb") as fh:
                machine = fh.read(64).decode("ascii", "replace").strip()
        except OSError:
            continue
        if machine:
            break
    # the host name as socket.gethostname() says it, without importing socket
    return dict(_dir_identity(path), machine=machine or os.uname().nodename,
                roots={root.name: _dir_identity(root.path) for root in roots})


def _dir_identity(path: str) -> Dict[str, Any]:
    try:
        st = os.stat(path)
        where: Dict[str, Any] = {"dev": st.st_dev, "ino": st.st_ino}
    except OSError:
        where = {}
    return dict(where, path=os.path.realpath(path))


_MODULES = {"apply": ".apply", "rollback": ".rollback", "status": ".observe", "verify": ".observe",
            "undo": ".undo"}


def _refuse_without_sglang(req: Any) -> None:
    """A root ``sglang`` holding no SGLang tree (a mistyped path on a host): a status would
    answer "nothing applied", a rollback "nothing to roll back", exit 0, an apply fail every
    precondition; every op says what is wrong instead, exit 5 (here, so a remote target
    answers as a local one, which the client refuses before any request)."""
    for root in req.roots:
        if root.name == PRIMARY_ROOT and root.layout == PLAIN:
            # the engine sees a path: a venv is found from its interpreter (as the client does
            # for a local target), so that is what to give
            venv = os.path.isfile(os.path.join(root.path, "pyvenv.cfg"))
            remedy = ("%s is a virtualenv: give its interpreter as the target, python:%s"
                      % (root.path, os.path.join(root.path, "bin", "python")) if venv else
                      "point the target at an SGLang checkout, the site-packages directory that "
                      "holds sglang, or its interpreter as python:/path/to/bin/python")
            raise TargetError(no_sglang(root.path, remedy), root=PRIMARY_ROOT, path=root.path)


def _terminated(request: Any, signum: int = signal.SIGTERM, committed: bool = False) -> PatchkitError:
    """What a signal in the engine left; ``committed``: this run's transaction had reached its
    commit point (the change is complete; details ``committed``)."""
    try:
        req = parse_request(request)
        state_root, writes = str(req.state_root.path), req.op in WRITES and not req.dry_run
    except PatchkitError:
        state_root, writes = None, True
    name = signal.Signals(signum).name
    return Terminated("terminated by %s; %s. Run patchkit status to see the target"
                      % (name, left_behind(state_root, writes, committed)), signal=name,
                      signum=int(signum), committed=committed or _committed_journal(state_root))


def _committed_journal(state_root: Optional[str]) -> bool:
    """Whether a journal in ``state_root`` is of a change that reached its commit point."""
    if state_root is None:
        return False
    try:
        store = Store(state_root)
        journal = store.read_journal()
        return journal is not None and store.read_state().txn == journal.txn
    except (PatchkitError, OSError):
        return False


def left_behind(state_root: Optional[str], writes: bool = True, committed: bool = False) -> str:
    """What a run stopped by a signal left on the target whose state is in ``state_root``: put
    back, a complete change (``committed``: the run's transaction reached its commit point, or
    the journal left is of one that did), or a journal the next run finishes or undoes
    (SIGTERM's message, and the CLI's on Ctrl-C). ``writes``: the run was one that writes (an
    apply, rollback or undo, not a dry run); one that only reads left the target as it was,
    unless a journal says otherwise (a killed run's, which it was finishing)."""
    journal = None
    if state_root is not None:
        try:
            store = Store(state_root)
            journal = store.read_journal()
            committed = committed or (journal is not None and store.read_state().txn == journal.txn)
        except (PatchkitError, OSError):
            journal = None
    if committed:
        return ("the change is complete: it had reached its commit point (the target's state.json "
                "records it) when the signal came%s" % (
                    "" if journal is None else "; the next patchkit run on this target finishes "
                    "its bookkeeping from the journal in %s" % store.path("journal.json")))
    if journal is None and not writes:
        return "it writes nothing to the target, which is as it was"
    if journal is None:
        return "nothing it wrote is left half-done: files written before its commit point were put back"
    return ("it stopped with a journal in %s; the next patchkit run on this target finishes "
            "or undoes it" % store.path("journal.json"))
