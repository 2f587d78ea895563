"""The read-only ops: status (what is applied, drifted, or present without a record) and
verify (re-run the verification of applied fixes). Neither writes a target file."""

from __future__ import annotations

import os
from typing import Any, Callable, Collection, Dict, List, Optional, Sequence, Set, Tuple

from ..errors import (DriftError, FixLost, NotApplied, PatchkitError, TargetError,
                      UnsafePathError, VerificationFailed, VersionMismatch)
from . import procs, record
from .contract import NOT_APPLIED, PARTLY_PRESENT, PRESENT_UNRECORDED, RECORDED
from .paths import Roots
from .request import FixSpec, Request, check_patch_paths, parse_fix, recorded_only_fix
from .records import FileRecord, FixRecord, State, fix_backups
from .store import Store
from .workspace import Key, Workspace

Reader = Callable[[str, str], Optional[bytes]]  # presence.Reader: (root, path) -> bytes or None


def status(req: Request, store: Store) -> Dict[str, Any]:
    """Each fix of the request, then each recorded fix the request does not name."""
    state = store.read_state()
    recorded = state.by_name()
    out: List[Dict[str, Any]] = []
    ws = Workspace(req.roots)
    last = state.last_writers()
    installs = record.installs(req.roots)
    releases: Dict[str, Any] = {}  # each root's release, read once (a partly-present fix, the end)
    beneath: Optional[Beneath] = None  # made for the first fix with no record
    made = False
    for spec in req.fixes:
        rec = recorded.get(spec.name)
        if rec:
            entry = judged(req, store, ws, spec, rec,
                           _recorded(ws, rec, last, installs, releases, req.git), releases)
        elif spec.not_needed:
            entry = {"name": spec.name, "state": "not-needed", "version": spec.version,
                     "applied_at": None, "files": [], "detail": spec.not_needed}
        else:  # only here are the fix's FILE records used (and read, for a lazy request)
            try:
                check_patch_paths(req.roots, [spec])
            except UnsafePathError as err:  # its row says why; every other fix is answered
                out.append({"name": spec.name, "state": NOT_APPLIED, "version": spec.version,
                            "applied_at": None, "files": [],
                            "unsafe": {"message": err.message, "details": err.details}})
                continue
            if not made:
                beneath, made = beneath_records(store, state, ws), True
            entry = unrecorded(ws, spec, req.roots, req.git, beneath and beneath(spec.name),
                               recorded)
            if entry["state"] in (PARTLY_PRESENT, NOT_APPLIED):
                _not_served(req, spec, entry, releases)
        if spec.release is not None:
            entry["releases"] = list(spec.release.get("versions") or [])
        if spec.not_needed and entry["state"] != "not-needed":
            entry.setdefault("detail", spec.not_needed)
        out.append(entry)
    listed = {s.name for s in req.fixes}
    left_out: List[Dict[str, Any]] = []  # recorded fixes on a root the request did not give
    for rec in state.fixes:
        if rec.name in listed:
            continue
        lacking = rec.lacking(req.roots)
        if lacking:
            left_out.append({"name": rec.name, "roots": lacking})
        else:
            out.append(_recorded(ws, rec, last, installs, releases, req.git))
    _renamed_rows(req, state, out)
    from .variants import release_of

    journal = store.read_journal()
    return {"state_root": req.state_root.path, "fixes": out, "left_out": left_out,
            "journal": None if journal is None else journal.to_json(),
            "release": release_of(req.roots, "sglang", releases, True),
            "running": procs.running(req.roots, store.dir, state, req.python,
                                     served=req.python if req.python_given else None,
                                     underneath=_underneath(ws, out))}


def judged(req: Request, store: Store, ws: Workspace, spec: FixSpec, rec: FixRecord,
           entry: Dict[str, Any], releases: Dict[str, Any]) -> Dict[str, Any]:
    """``status``'s word on a recorded fix, given what its files hold (``_recorded``'s
    ``entry``, changed in place) and the catalog's version for the target (``spec``): verify
    says a lost fix's why and advice with it, so the two never differ."""
    entry["catalog_version"] = spec.version
    # the catalog's version is no upgrade where it does not serve the release the
    # target runs (apply and sync refuse it there): the applied one stays, said so
    # (no version need serve a release that holds the fix upstream)
    unserved = unserved_detail(req, spec, releases) if not spec.not_needed and (
        rec.version != spec.version or entry["state"] in ("lost", "applied")) else None
    if spec.not_needed and entry["state"] in ("applied", "lost"):  # the release took it
        entry.update(state="not-needed", detail=held_upstream(
            spec, rec, lost=entry.get("lost") or ""))
    elif entry.get("held"):  # the release looks to have taken it: the catalog does not say
        entry["detail"] = held_detail(spec, rec, entry["held"])
        if rec.version != spec.version and unserved is None:
            entry["state"] = "outdated"
    elif unserved is not None:
        _say_unserved(entry, rec, spec, unserved)
    elif entry["state"] == "applied" and rec.version != spec.version:
        entry["state"] = "outdated"  # another version is applied than the catalog's
    elif (entry["state"] == "drifted" and rec.version != spec.version
          and "detail" not in entry and _holds_catalog(req, store, ws, rec, spec)):
        entry.update(state="outdated", detail=(
            "the files hold v%d's change already (edited by hand, or refreshed from "
            "here): patchkit apply %s records it, writing nothing" % (spec.version, spec.name)))
    return entry


def take_renamed(req: Request, state: State) -> Tuple[State, Dict[str, str]]:
    """The state with each record under a name no fix of the request has, whose series is a
    requested fix's that has no record (the same changes, in order, by ``diff_sha256``) and
    whose files still hold what it wrote, renamed to that fix (and named so by the records
    requiring it): the fix renamed in the catalog by hand. Its backups are renamed with it
    (``store.adopt_backups`` links them under the new name before the state names them).
    Returns new name -> old name. Apply, sync and rollback take it over so; a status says it
    (:func:`_renamed_rows`)."""
    names = {s.name for s in (*req.fixes, *req.dependencies)}
    recorded = state.by_name()
    fixes = list(state.fixes)
    renamed: Dict[str, str] = {}
    for spec in req.fixes:
        if spec.name in recorded or spec.recorded_only or spec.not_needed:
            continue
        for i, rec in enumerate(fixes):
            if rec.name not in names and rec.name not in renamed.values() \
                    and same_series(rec.patches, spec.patches) \
                    and not drifted_files(req.roots, state, rec):
                fixes[i] = _renamed_record(rec, spec.name, spec.version,
                                           moved=not req.dry_run)
                renamed[spec.name] = rec.name
                break
    if not renamed:
        return state, {}
    back = {old: new for new, old in renamed.items()}
    fixes = [f if not set(f.requires) & set(back) else FixRecord.from_json(
        dict(f.to_json(), requires=[back.get(r, r) for r in f.requires]), "state.json")
        for f in fixes]
    return State(state.txn, fixes, state.extra), renamed


def _renamed_record(rec: FixRecord, name: str, version: int, moved: bool) -> FixRecord:
    """``rec`` as fix ``name`` at ``version``; ``moved``: its backups named under the new
    name's folder (a dry run reads them where they are)."""
    old, new = fix_backups(rec.name) + "/", fix_backups(name) + "/"
    data = rec.to_json()
    if not moved:
        return FixRecord.from_json(dict(data, name=name, version=version), "state.json")
    if isinstance(data.get("backup_dir"), str):
        data["backup_dir"] = data["backup_dir"].replace(old.rstrip("/"), new.rstrip("/"))
    for f in data.get("files") or ():
        if isinstance(f.get("backup"), str) and f["backup"].startswith(old):
            f["backup"] = new + f["backup"][len(old):]
    return FixRecord.from_json(dict(data, name=name, version=version), "state.json")


def _renamed_rows(req: Request, state: State, rows: List[Dict[str, Any]]) -> None:
    """A fix renamed in the catalog by hand, seen from its old record: the row of the new name
    (``present-unrecorded``) and the row of the record under the old one (which the catalog no
    longer has) each say so, and that an apply (or sync) of the new name takes the record
    over, writing nothing: what :func:`take_renamed` would take over."""
    by_name = {r.get("name"): r for r in rows}
    for name, was in take_renamed(req, state)[1].items():
        if (by_name.get(name) or {}).get("state") != PRESENT_UNRECORDED or was not in by_name:
            continue
        by_name[name]["detail"] = ("recorded as %s, whose manifest the catalog no longer has, "
                                   "with this series (renamed in the catalog): patchkit apply "
                                   "%s (or sync) takes its record over, writing nothing"
                                   % (was, name))
        by_name[was]["detail"] = ("renamed %s in the catalog (the same series): patchkit apply "
                                  "%s (or sync) takes this record over, writing nothing"
                                  % (name, name))


def refuse_changed_series(spec: FixSpec, rec: FixRecord) -> None:
    """Refuse the catalog's version of a fix that is not what the target applied as that
    version: its patches changed since, without a version bump. A status does not ask (it
    reads no series); apply, sync and verify refuse: the host runs another change than the
    catalog's, and only a new version can tell them apart (docs/manifest.md, "Versions").

    The record names each patch's ``diff_sha256``, the digest of its change alone
    (``catalog.series.diff_digest``), and its ``sha256``, of the whole file: a patch is the
    same when either agrees (a record written before ``diff_sha256`` holds only the file's),
    so a series whose mail headers or messages changed (an export imported elsewhere) is the
    one the host runs, under other file names too when every patch's change is the same, in
    order; a changed diff is not."""
    if spec.recorded_only or rec.version != spec.version or not rec.patches:
        return
    applied = {str(p.get("file")): p for p in rec.patches}
    now = {str(p.get("file")): p for p in spec.patches}
    changed = sorted(f for f in {*applied, *now} if not _same_patch(applied.get(f), now.get(f)))
    if changed and _diffs(rec.patches) is not None and _diffs(rec.patches) == _diffs(spec.patches):
        changed = []  # the same changes in the same order, in files named otherwise
    if changed:
        raise VersionMismatch(
            "fix %s v%s applied here is not the catalog's v%s: its series changed since, "
            "without a version bump (%s); give the changed series a version of its own (in its "
            "manifest, the `version` of the entry holding that series, the top level's or the "
            "[[variants]] entry serving the release the target runs, above every version the "
            "fix has, and a [[changelog]] entry for it; not patchkit refresh, which takes the "
            "series from a checkout again, over the edit), then patchkit apply %s upgrades it"
            % (spec.name, rec.version, spec.version, ", ".join(changed), spec.name),
            fix=spec.name, patches=changed)


def same_series(applied: Sequence[Dict[str, Any]], series: Sequence[Dict[str, Any]]) -> bool:
    """Whether a record's patches (``applied``) and a fix's (``series``) make the same changes
    in the same order, by each patch's ``diff_sha256`` (whatever their files are named)."""
    ours = _diffs(applied)
    return bool(ours) and ours == _diffs(series)


def _same_patch(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> bool:
    """Whether two patch entries (file, sha256, diff_sha256) name the same change."""
    if a is None or b is None:
        return False
    return any(a.get(k) is not None and a.get(k) == b.get(k) for k in ("sha256", "diff_sha256"))


def _diffs(patches: Sequence[Dict[str, Any]]) -> Optional[List[str]]:
    """The ``diff_sha256`` of each patch, in order; None when one has none."""
    out = [p.get("diff_sha256") for p in patches]
    return None if any(not isinstance(d, str) for d in out) else [str(d) for d in out]


def _underneath(ws: Workspace, entries: List[Dict[str, Any]]) -> Dict[Key, str]:
    """(root, path) -> the absolute path of each file a recorded fix wrote that no longer holds
    it (drifted, or replaced by a reinstall): ``procs.running`` dates it from its ctime."""
    out: Dict[Key, str] = {}
    for e in entries:
        for f in e.get("files") or () if e.get("state") in RECORDED else ():
            if f.get("state") not in (None, "ok", "missing") and f.get("root") in ws.roots:
                root = ws.roots.get(f["root"])
                out[(f["root"], f["path"])] = os.path.join(root.path, root.mapped(f["path"]))
    return out


def held_upstream(spec: FixSpec, rec: FixRecord, outcome: str = "", lost: str = "") -> str:
    """Why a fix recorded on a release that holds its change upstream (the host moved to the
    release that took it) is not needed, and what becomes of its record: kept (status), or
    ``outcome`` of apply and sync, "forgotten" or "would be forgotten", writing nothing.
    Recorded intact, its files hold what it wrote, the change as the release has it, so
    rolling it back would put the older release's bytes into this one (rollback refuses);
    ``lost`` (why the move took its change out of the files): they hold the release's bytes,
    which have the change, and the record is stale either way."""
    why = ". It was lost: %s" % lost if lost else ""
    if outcome:
        return "%s: its v%s record %s, nothing written (%s)%s" % (
            spec.not_needed, rec.version, outcome, "the release's files hold the change" if lost
            else "its files hold the change as the release has it", why)
    if lost:
        return ("%s: its v%s record here is kept until patchkit sync (or patchkit apply %s) "
                "forgets it, writing nothing: the release's files hold the change%s"
                % (spec.not_needed, rec.version, spec.name, why))
    return ("%s: its v%s record here is kept until patchkit sync (or patchkit apply %s) forgets "
            "it, writing nothing: its files hold what v%s wrote, the change as the release has it"
            % (spec.not_needed, rec.version, spec.name, rec.version))


def unserved_detail(req: Request, spec: FixSpec, releases: Dict[str, Any]
                    ) -> Optional[Tuple[str, str]]:
    """(the release the target runs, the versions there are and what they serve) when no
    version of the fix serves that release: ``spec`` is then the top level, which
    ``variants.choose`` keeps when none does, and is no version for this target. None when
    one serves it, the fix checks no release, or the release cannot be told."""
    from .variants import release_of

    if spec.release is None:
        return None
    wanted = [str(v) for v in spec.release.get("versions") or []]
    found = release_of(req.roots, str(spec.release.get("root") or "sglang"), releases, req.git)
    if not wanted or found is None or found in wanted:
        return None
    served = ", ".join("v%s for %s" % (v, ", ".join(rs)) for v, rs in spec.variants_known
                       if rs) or "v%s is for %s" % (spec.version, ", ".join(wanted))
    return found, served


def _not_served(req: Request, spec: FixSpec, entry: Dict[str, Any],
                releases: Dict[str, Any]) -> None:
    """An unrecorded fix no version of which serves the release the target runs is
    ``not-applied``, saying so and which releases its versions serve. One ``partly-present``
    by a series written for other releases is too: some of its lines match by chance, which
    says nothing (a clean install of an older release looked damaged, and failed ``status
    --exit-code``)."""
    unserved = unserved_detail(req, spec, releases)
    if unserved is None:
        return
    found, served = unserved
    entry.update(state="not-applied", files=[], detail=(
        "no version of the fix serves %s (%s): its change was not looked for there; %s"
        % (found, served, spec.make_for(found))))


def _say_unserved(entry: Dict[str, Any], rec: FixRecord, spec: FixSpec,
                  unserved: Tuple[str, str]) -> None:
    """A recorded fix whose catalog version does not serve the release the target runs: not
    ``outdated`` (no upgrade is there to make: apply and sync refuse that version here), so an
    intact applied version stays ``applied``; drifted stays drifted, and a lost one is told
    that applying it again needs a version for the release first (docs/cli.md, status)."""
    found, served = unserved
    make = spec.make_for(found)
    said = "no version of the fix serves %s (%s)" % (found, served)
    if entry["state"] == "lost":  # a sentence of its own, after why it is lost
        entry["detail"] = "%s. %s%s: %s, then apply it" % (entry["lost"], said[0].upper(),
                                                          said[1:], make)
    elif "detail" not in entry and rec.version == spec.version:  # the tree moved, not the fix
        entry["detail"] = "%s: the applied v%s stays as it is; %s" % (said, rec.version, make)
    elif "detail" not in entry:  # a root given elsewhere says more about a drift
        entry["detail"] = ("%s: the applied v%s stays, as apply and sync refuse v%s here; %s"
                           % (said, rec.version, spec.version, make))


def _holds_catalog(req: Request, store: Store, ws: Workspace, rec: FixRecord, spec: FixSpec) -> bool:
    """Whether a drifted fix's files are the catalog's version of it (apply's rule for an
    upgrade that needs no --force); its backups are read into a workspace of their own."""
    from .plan import holds_version, restore_in_memory

    check_patch_paths(req.roots, [spec])
    scratch = Workspace(req.roots)
    try:
        restore_in_memory(store, scratch, rec)
    except TargetError:
        return False  # a damaged backup: status says drifted, rollback says why
    return holds_version(scratch, spec, rec, {f.key: ws.sha256(*f.key) for f in rec.files})


Beneath = Callable[[str], Optional[Reader]]  # fix name -> its beneath_records reader, or None


def beneath_records(store: Store, state: State, ws: Workspace) -> Optional[Beneath]:
    """For a fix the target has no record of, by name: a reader of each file as it was before
    the recorded fixes that build on that fix (``requires`` it, directly or through another),
    the backup of the first of them, where the file still holds what the last fix to write it
    wrote; any other file as ``ws`` holds it. None when no recorded fix builds on it (or
    nothing is recorded). The presence check of the fix reads it too: a recorded fix applied on
    top of it (a fix depending on a commit of the fork) may have rewritten the lines that show
    it. Only those: the files before any other recorded fix (a dead change a revert fix takes
    back, say) are not where the fix is looked for."""
    if not state.fixes:
        return None
    from .fsops import read_bytes
    from .hunks import sha256_bytes

    needs = {rec.name: set(rec.requires) for rec in state.fixes}
    last = state.last_writers()

    def above(under: str) -> Set[str]:
        out: Set[str] = set()
        todo = [under]
        while todo:
            name = todo.pop()
            for other, required in needs.items():
                if name in required and other not in out:
                    out.add(other)
                    todo.append(other)
        return out

    def of(under: str) -> Optional[Reader]:
        building = above(under)
        first: Dict[Key, FileRecord] = {}
        for rec in state.fixes:  # application order
            if rec.name in building:
                for f in rec.files:
                    first.setdefault(f.key, f)
        if not first:
            return None

        def read(root: str, path: str) -> Optional[bytes]:
            now = ws.read(root, path)
            f = first.get((root, path))
            if f is None or ws.sha256(root, path) != last[(root, path)][1].after_sha256:
                return now  # not written by a fix building on it, or changed since: as it is
            if f.before_sha256 is None:
                return None  # the first fix created it
            data = read_bytes(store.path(f.backup)) if f.backup else None
            return data if data is not None and sha256_bytes(data) == f.before_sha256 else now

        return read

    return of


def unrecorded(ws: Workspace, spec: FixSpec, roots: Roots, git: bool = True,
               beneath: Optional[Reader] = None, recorded: Collection[str] = ()
               ) -> Dict[str, Any]:
    """The status entry of a fix the target has no record of. ``git=False`` (--no-git): a
    revert fix whose change is in the files is ``not-needed`` without asking git whether the
    commit it reverts was ever there (a release wheel in a container build). ``beneath``:
    the reader :func:`beneath_records` gives for this fix; ``recorded``: the names of the
    fixes the target records (a revert of one of them has something to revert)."""
    entry = _detect(ws, spec, beneath)
    if spec.revert is not None and not git and entry["state"] == PRESENT_UNRECORDED:
        entry.update(state="not-needed", files=[], detail=(
            "nothing to revert on this target: the files hold what the revert makes of them "
            "(--no-git: git was not asked whether the commit it reverts was ever there)"))
        return entry
    # a revert fix's change in the files was made by hand only when the commit it
    # reverts is in HEAD's history; otherwise that change was never there, and a file
    # that only looks partly reverted (another release's code) says nothing either
    if spec.revert is not None and entry["state"] in (PRESENT_UNRECORDED, PARTLY_PRESENT):
        from . import revert  # here: only an unrecorded revert fix needs the git code

        source, found, why = revert.resolved(spec, roots)
        if source is None and (entry["state"] == PRESENT_UNRECORDED or not found["ok"]):
            entry.update(state="not-needed", files=[], detail=why or (
                "nothing to revert on this target: the files hold what the revert makes of them"))
    # a revert of a commit by id with no series of its own: only git can say whether there
    # is anything to revert (a release's own tree never holds a fork's commit)
    elif spec.revert is not None and git and entry["state"] == NOT_APPLIED and not spec.files:
        from . import revert

        why = revert.resolved(spec, roots)[2]
        if why:
            entry.update(state="not-needed", files=[], detail=why)
    # outside git, what the reverted fix's versions serve says it: on a release none serves,
    # its change is not in the files, which another release's series only half matches
    if spec.revert is not None and entry["state"] in (PARTLY_PRESENT, NOT_APPLIED):
        from . import revert

        why = revert.not_on_release(spec, roots, git, recorded)
        if why:
            entry.update(state="not-needed", files=[], detail=why)
    return entry


def _file_state(ok: bool, current: Optional[bytes]) -> str:
    return "ok" if ok else ("missing" if current is None else "drifted")


def _recorded(ws: Workspace, rec: FixRecord, last: Dict[Key, Tuple[str, FileRecord]],
              installs: Optional[Dict[str, record.Installed]] = None,
              releases: Optional[Dict[str, Any]] = None, git: bool = True) -> Dict[str, Any]:
    """A file is ``ok`` when it holds what the last fix to touch it wrote (maybe a later fix);
    a fix is ``lost`` when every file not ``ok`` is as its installed wheel's RECORD says (the
    package was reinstalled or upgraded underneath it), or when the tree runs a release the
    applied version was not for (:func:`moved_detail`). ``releases``: each root's release,
    read once per request."""
    out = []
    for f in rec.files:
        have, mode = ws.held(f.root, f.path)  # hashed, not kept: 2,152 files of a drift series
        wrote = last.get(f.key, (rec.name, f))[1]
        ok = have == wrote.after_sha256
        seen = ws.roots.file(f.root, f.path, state="ok" if ok else (
            "missing" if have is None else "drifted"))
        chmodded = mode_drift(wrote, mode) if ok else {}
        if chmodded:
            seen.update(state="drifted", **chmodded)
        out.append(seen)
    drifted = any(f["state"] != "ok" for f in out)
    entry: Dict[str, Any] = {"name": rec.name, "state": "drifted" if drifted else "applied",
                             "version": rec.version, "applied_at": rec.applied_at, "files": out}
    lost = lost_detail(ws, rec, out, installs) if drifted and installs else None
    label, edited, owned = "reinstalled", set(), set()  # type: Tuple[str, Set[Key], Set[Key]]
    todo = "Apply it again onto the new install (patchkit apply %s)" % rec.name
    if drifted and not lost:
        moved = moved_detail(ws, rec, out, {} if releases is None else releases, git)
        if moved is not None:
            lost, label, edited, owned = moved[0], "replaced", moved[2], moved[3]
            entry["moved"] = moved[1]
            todo = ("Apply the fix again onto the new release (patchkit sync, or patchkit "
                    "apply %s)" % rec.name)
    if drifted and not lost:
        unheld = unheld_detail(ws, rec, out, git)
        if unheld is not None:
            lost, label, edited, owned = unheld[0], "replaced", unheld[2], unheld[3]
            entry["commits_gone"] = unheld[1]
            todo = ("Apply it again onto the files HEAD has (patchkit sync, or patchkit apply "
                    "--commit %s for a commit again)" % rec.name)
    if not drifted and releases is not None:
        held = release_holds(ws, rec, out, releases, git, installs or {}, last)
        if held is not None:
            entry.update(held=held, release_files=sorted(
                [f["root"], f["path"]] for f in out if f["root"] == held["root"]))
    if lost:  # ``lost``: why, which an apply that applies it again reports (not what to do)
        entry.update(state="lost", detail="%s. %s" % (lost, todo), lost=lost)
        for seen in out:
            if seen["state"] != "ok" and (seen["root"], seen["path"]) not in edited:
                seen["state"] = label
        if "moved" not in entry and "commits_gone" not in entry:  # a reinstall: RECORD says
            owned = release_owned(ws, out, set(installs or {}), installs or {}, git)
        if owned:
            entry["release_files"] = sorted([r, p] for r, p in owned)
    elif drifted:
        gone = {(f["root"], f["path"]) for f in out if f["state"] == "missing"}
        elsewhere = root_elsewhere(ws.roots, rec, gone)
        if elsewhere:
            entry["detail"] = elsewhere
    return entry


def root_elsewhere(roots: Roots, rec: FixRecord, missing: Set[Key]) -> Optional[str]:
    """Why a recorded fix's files are missing when a root is given at another directory than
    the one the fix was applied with, that directory is still there, and none of the fix's
    files on the root is in the one given (a mistyped ``--root``): what to give instead.
    None when nothing says so (a tree moved keeps its files; one whose old directory is gone
    is drift)."""
    for name, then in sorted(rec.roots.items()):
        root = next((r for r in roots if r.name == name), None)
        if root is None or not os.path.isabs(then) or os.path.normpath(then) == root.path \
                or os.path.realpath(then) == root.real or not os.path.isdir(then):
            continue
        written = [f.key for f in rec.files if f.root == name and f.after_sha256 is not None]
        if written and all(key in missing for key in written):
            return ("root %s is %s here, but %s was applied with %s=%s (still there), and none "
                    "of its files on that root is in %s: give --root %s=%s if that is the root"
                    % (name, root.path, rec.name, name, then, root.path, name, then))
    return None


def lost_fixes(roots: Roots, state: State, ws: Optional[Workspace] = None, git: bool = True
               ) -> Dict[str, Dict[str, Any]]:
    """Each recorded fix that is ``lost``, as ``status`` shows it (files ``reinstalled`` or
    ``replaced``)."""
    return {n: s for n, s in moved_under(roots, state, ws, git).items() if s["state"] == "lost"}


def moved_under(roots: Roots, state: State, ws: Optional[Workspace] = None, git: bool = True
                ) -> Dict[str, Dict[str, Any]]:
    """``status``'s entry of each recorded fix the tree may have moved under: ``lost``, or
    ``held`` by the release it moved to (:func:`release_holds`). Only a fix that could be is
    read: on an installed package, recorded for releases the tree no longer runs, or applied
    with ``--commit`` (whose commit git is asked about only when its files changed:
    :func:`unheld_detail`)."""
    installs = record.installs(roots)
    releases: Dict[str, Any] = {}
    maybe = [rec for rec in state.fixes if not rec.lacking(roots)  # a root not given: not looked at
             and (installs or _release_moved(roots, rec, releases, git)
                  or (git and bool(rec.commits)))]
    if not maybe:
        return {}
    ws, last = ws or Workspace(roots), state.last_writers()
    seen = (_recorded(ws, rec, last, installs, releases, git) for rec in maybe)
    return {s["name"]: s for s in seen if s["state"] == "lost" or s.get("held")}


def release_holds(ws: Workspace, rec: FixRecord, files: List[Dict[str, Any]],
                  releases: Dict[str, Any], git: bool, installs: Dict[str, record.Installed],
                  last: Dict[Key, Tuple[str, FileRecord]]) -> Optional[Dict[str, str]]:
    """``{root, from, to}`` when an intact fix's root runs a release its applied version was
    not for, and every file of it there is that release's own (:func:`release_owned`) while
    holding what the fix wrote: the release the tree moved to holds the fix's change, and the
    fix's backups are the old release's bytes, which a rollback would put into it. None
    otherwise (or when it cannot be told). A release a fix moved (one wrote the version file
    as it now is: a series from one release to the next) is no move under the others: the
    question, and the ``git status`` it asks, is left out (``last``: the recorded writers)."""
    moved = _release_moved(ws.roots, rec, releases, git)
    if moved is None:
        return None
    name = str((rec.release or {}).get("root") or "sglang")
    if name in ws.roots:
        from .variants import detect_release

        version = (name, detect_release(ws.roots.get(name), git=False)[1])
        if version in last and ws.held(*version)[0] == last[version][1].after_sha256:
            return None
    on = {(f["root"], f["path"]) for f in files if f["root"] == name}
    if not on or release_owned(ws, files, {name}, installs, git) != on:
        return None
    return {"root": name, "from": moved[0], "to": moved[1]}


def release_owned(ws: Workspace, files: List[Dict[str, Any]], roots: Collection[str],
                  installs: Dict[str, record.Installed], git: bool) -> Set[Key]:
    """Of a recorded fix's files on ``roots`` that hold what it wrote (``ok``), those that are
    the release's own bytes: as the installed wheel's RECORD lists them, or HEAD's on a git
    checkout. After the tree moved to another release (a reinstall, a checkout) these hold the
    fix's change because that release does: its backups, the old release's bytes, are never
    written into them (status, rollback and apply take the answer from the status entry; a
    fix lost to a checkout's move has it from the ``git status`` that finds its edited files,
    :func:`moved_detail` and :func:`unheld_detail`, asked once)."""
    out: Set[Key] = set()
    for name in sorted(roots):
        paths = [f["path"] for f in files if f["root"] == name and f["state"] == "ok"]
        if not paths or name not in ws.roots:
            continue
        root = ws.roots.get(name)
        dist = installs.get(name)
        if dist is not None:
            out.update((name, p) for p in paths
                       if record.matches(dist, root, p, ws.entry(name, p).current))
            continue
        from . import gitcli  # here: only a tree moved under a fix asks git about its files

        answer = gitcli.changed_paths(root.path, [root.mapped(p) for p in paths]) if git else None
        if answer is not None and answer.checkout and not answer.error:
            out.update((name, p) for p in paths if root.mapped(p) not in answer.changed)
    return out


def held_detail(spec: FixSpec, rec: FixRecord, held: Dict[str, str]) -> str:
    """What ``status`` says of a fix whose files the release the tree moved to holds
    (:func:`release_holds`), and what tells whether that release took the change."""
    return ("sglang %s -> %s: the tree moved to a release whose own files hold this fix's change "
            "as v%s wrote it (its backups are %s's bytes, which a rollback would put into them: "
            "it refuses without --force). %s looks to hold the change upstream: patchkit "
            "upstream check %s --release %s tells, and marks it so with --mark (or patchkit "
            "rebase %s --onto %s does); patchkit sync then forgets the record, writing nothing"
            % (held["from"], held["to"], rec.version, held["from"], held["to"], spec.name,
               held["to"], spec.name, held["to"]))


def replaced_files(entry: Dict[str, Any]) -> List[Tuple[str, str]]:
    """(root, path) of a lost fix's files a reinstall or another release replaced: the files
    its rollback leaves as they are (every file on a root moved to another release, or whose
    HEAD no longer holds the fix's commit: its backups are bytes of another tree)."""
    moved = {(entry.get("moved") or {}).get("root")}
    moved.update(c["root"] for c in entry.get("commits_gone") or ())
    owned = {(r, p) for r, p in entry.get("release_files") or ()}
    return [(f["root"], f["path"]) for f in entry["files"]
            if f["state"] in ("reinstalled", "replaced") or f["root"] in moved
            or (f["root"], f["path"]) in owned]


def commits_gone(roots: Roots, rec: FixRecord, git: bool) -> List[Dict[str, str]]:
    """The commits ``apply --commit`` made for the fix that HEAD's history no longer holds
    (a checkout of another branch or tag, a reset): one ``git merge-base --is-ancestor``
    each, on the roots given that are still git checkouts; none with ``git`` off."""
    if not git or not rec.commits:
        return []
    from . import gitcommit  # here: only a fix applied with --commit asks git

    given = {r.name for r in roots}
    cos = gitcommit.checkouts(roots, sorted({c["root"] for c in rec.commits if c["root"] in given}))
    return [{"root": c["root"], "sha": c["sha"]} for c in rec.commits
            if c["root"] in cos and not cos[c["root"]].is_ancestor(c["sha"])]


def unheld_detail(ws: Workspace, rec: FixRecord, files: List[Dict[str, Any]], git: bool
                  ) -> Optional[Tuple[str, List[Dict[str, str]], Set[Key], Set[Key]]]:
    """Why a fix applied with ``--commit`` is lost when HEAD no longer holds its commit and
    git put HEAD's bytes back in its files (``git checkout`` of the next release where the
    same version serves both, ``git reset --hard``): nobody edited them, and the fix is not
    there. With the why: the commits gone, and the changed files that differ from HEAD
    (edited since: ``drifted``, kept by a rollback as the others are), and the files that
    hold what the fix wrote as HEAD has them (:func:`release_owned`'s, from the same ``git
    status``). None when every commit is in HEAD's history, or no changed file of their roots
    holds HEAD's bytes (a ``reset --soft`` leaves the fix's bytes; an edit over them is drift)."""
    from . import gitcli

    gone = commits_gone(ws.roots, rec, git)
    if not gone:
        return None
    on = {c["root"] for c in gone}
    changed = [f for f in files if f["state"] != "ok"]
    # a changed file of another root (a serve script) was not put back by git: drift
    edited: Set[Key] = {(f["root"], f["path"]) for f in changed if f["root"] not in on}
    held, owned = 0, set()  # type: Tuple[int, Set[Key]]
    for name in sorted(on):
        root = ws.roots.get(name)
        paths = {root.mapped(f["path"]): f["path"] for f in changed if f["root"] == name}
        ok = {root.mapped(f["path"]): f["path"] for f in files
              if f["root"] == name and f["state"] == "ok"}
        answer = gitcli.changed_paths(root.path, list(paths) + list(ok)) if paths else None
        if answer is None or not answer.checkout or answer.error:
            edited.update((name, p) for p in paths.values())
            continue
        edited.update((name, paths[rel]) for rel in paths if rel in answer.changed)
        held += sum(1 for rel in paths if rel not in answer.changed)
        owned.update((name, ok[rel]) for rel in ok if rel not in answer.changed)
    if not held:
        return None
    kept = "; %d file(s) edited since, kept as they are" % len(edited) if edited else ""
    which = ", ".join("%s %s" % (c["root"], c["sha"][:12]) for c in gone)
    return ("its commit (%s) is not in the history of HEAD any more (a checkout or a reset "
            "moved HEAD), and its files hold HEAD's bytes%s; recorded v%s no longer present"
            % (which, kept, rec.version), gone, edited, owned)


def _release_moved(roots: Roots, rec: FixRecord, releases: Dict[str, Any], git: bool
                   ) -> Optional[Tuple[str, str]]:
    """(the releases the fix was applied for, the one the tree runs now) when the tree runs a
    release the applied version was not for; None when it does, or either is unknown."""
    from .variants import release_of

    versions = [str(v) for v in (rec.release or {}).get("versions") or ()]
    if not versions:
        return None
    now = release_of(roots, str((rec.release or {}).get("root") or "sglang"), releases, git)
    return None if now is None or now in versions else (", ".join(versions), now)


def moved_detail(ws: Workspace, rec: FixRecord, files: List[Dict[str, Any]],
                 releases: Dict[str, Any], git: bool
                 ) -> Optional[Tuple[str, Dict[str, str], Set[Key], Set[Key]]]:
    """Why a recorded fix is lost when the tree under it was moved to another release (``git
    checkout`` or a reset to the new tag, a new tree unpacked over it): the root runs a
    release the applied version was not for, so its backups are another release's bytes and
    the fix's change is not what its files hold. With the why: ``moved`` (root, from, to),
    and the changed files that are not as HEAD has them on a git checkout (edited since:
    ``drifted``, kept by a rollback as the others are), and the files that hold what the fix
    wrote as HEAD, the new release, has them (:func:`release_owned`'s, from the same ``git
    status``). None when the release did not move (or cannot be told)."""
    from . import gitcli

    from .auto import uncommitted_release, version_file

    moved = _release_moved(ws.roots, rec, releases, git)
    if moved is None:
        return None
    root = str((rec.release or {}).get("root") or "sglang")
    changed = [f for f in files if f["state"] != "ok"]
    # a changed file of another root (a serve script) did not move with the release: drift
    edited: Set[Key] = {(f["root"], f["path"]) for f in changed if f["root"] != root}
    rels = [f["path"] for f in changed if f["root"] == root]
    ok = [f["path"] for f in files if f["root"] == root and f["state"] == "ok"]
    the = ws.roots.get(root)
    version = version_file(the)
    answer = (gitcli.changed_paths(the.path, rels + ok + ([version] if version else []))
              if git and rels else None)
    unpacked, owned = False, set()  # type: Tuple[bool, Set[Key]]
    if answer is not None and answer.checkout and not answer.error:
        # the version file unlike HEAD's: the new release was put over the checkout and not
        # committed, so HEAD cannot tell an edit from the new release's bytes (a trial)
        unpacked = bool(uncommitted_release(answer, the))
        if not unpacked:
            edited.update((root, r) for r in rels if r in answer.changed)
            owned = {(root, r) for r in ok if r not in answer.changed}
    kept = "; %d file(s) edited since, kept as they are" % len(edited) if edited else ""
    how = ("another release's files were put over the checkout and not committed (HEAD is "
           "still the old release's: commit them, git -C %s add -A && git -C %s commit, before "
           "applying again), whose bytes the files hold" % (the.path, the.path) if unpacked
           else "the checkout moved to another release, whose bytes the files hold")
    return ("sglang %s -> %s: %s (their backups are the old release's)%s; recorded v%s no "
            "longer present" % (moved[0], moved[1], how, kept, rec.version),
            {"root": root, "from": moved[0], "to": moved[1]}, edited, owned)


def lost_detail(ws: Workspace, rec: FixRecord, files: List[Dict[str, Any]],
                installs: Dict[str, record.Installed]) -> Optional[str]:
    """Why a recorded fix is lost (its changed files reinstalled from a wheel), or None."""
    seen = set()
    for f in files:
        if f["state"] == "ok":
            continue
        dist = installs.get(f["root"])
        if dist is None:
            return None
        root = ws.roots.get(f["root"])
        current = ws.entry(f["root"], f["path"]).current
        same = record.matches(dist, root, f["path"], current)
        gone = current is None and dist.hexdigest(root.mapped(f["path"])) is None
        if not (same or gone):
            return None
        seen.add(f["root"])
    if not seen:
        return None
    stamp = (rec.installed or {}).get("record_stamp")
    if stamp and all(installs[r].stamp == stamp for r in seen):
        return None  # the install the fix went into is still there: files restored by hand
    was = rec.installed_version
    now = ", ".join(installs[r].version for r in sorted(seen))
    what = "%s %s" % (record.DIST, now if was in (None, now) else "%s -> %s" % (was, now))
    return "%s reinstalled; recorded v%s no longer present" % (what, rec.version)


def drifted_files(roots: Roots, state: State, rec: FixRecord,
                  ws: Optional[Workspace] = None) -> List[Dict[str, Any]]:
    """The recorded fix's files that ``status`` shows ``drifted`` or ``missing``."""
    seen = _recorded(ws or Workspace(roots), rec, state.last_writers())
    return [f for f in seen["files"] if f["state"] != "ok"]


SHOWN = 5  # drifted files named in a message; the result lists them all


#: a verify of a fix answered from its record (``recorded_only``): what it could not check
OLDER = ("v%(old)s is applied and the catalog's %(fix)s is v%(new)s, whose checks are for its own "
         "change: v%(old)s's files were checked against its record (the hashes of the files "
         "patchkit wrote) and v%(new)s's checks were not run; patchkit apply %(fix)s upgrades it")
GONE = ("its manifest is gone from the catalog or cannot be read, so its files were checked "
        "against its record (the hashes of the files patchkit wrote) and its own verification "
        "checks were not run")


def put_back(fix: str, state: State) -> str:
    """What to do about a drifted fix: its rollback (with the applied fixes that require it,
    which a rollback of it alone is refused for) and apply again, or a new version."""
    after = state.requiring(fix)
    return ("to put the fix back as written: patchkit rollback --force %s, then patchkit "
            "apply %s (the edits are lost%s); to keep the edits, make them a new version of the "
            "fix (patchkit refresh %s --from CHECKOUT)"
            % (" ".join([fix, *after]), " ".join([fix, *after]),
               "; %s require%s it" % (", ".join(after), "s" if len(after) == 1 else "") if after else "",
               fix))


def drift_todo(fix: str, drifted: List[Dict[str, Any]], state: State, roots: Roots) -> str:
    """What to do about a drifted fix's files: a chmod when only their modes changed (the
    bytes are as written), else :func:`put_back`."""
    if drifted and all(f.get("recorded_mode") for f in drifted):
        return ("only the mode changed, the bytes are as patchkit wrote them: put it back (%s), "
                "or %s" % (chmods(drifted[:SHOWN], roots), put_back(fix, state)))
    if drifted and _taken_out(fix, drifted, state, roots):
        # no edit to keep: "to keep the edits, make them a new version" misled (a trial)
        after = " ".join([fix, *state.requiring(fix)])
        return ("its files hold what they held before it (its change was taken out outside "
                "patchkit: git stash, git checkout, a copy), so there is no edit to keep: "
                "patchkit rollback --force %s forgets it, writing nothing new, then patchkit "
                "apply %s applies it again" % (after, after))
    return put_back(fix, state)


def _taken_out(fix: str, drifted: List[Dict[str, Any]], state: State, roots: Roots) -> bool:
    """Whether every drifted file of ``fix`` holds its bytes from before the fix (absent for a
    file the fix created), as its record names them."""
    from .fsops import sha256_of

    rec = state.by_name().get(fix)
    if rec is None:
        return False
    before = {(f.root, f.path): f.before_sha256 for f in rec.files}
    for f in drifted:
        key = (f["root"], f["path"])
        if key not in before or f.get("recorded_mode"):
            return False
        try:
            now = sha256_of(roots.resolve(f["root"], f["path"]))
        except (OSError, PatchkitError):
            return False
        if now != before[key]:
            return False
    return True


def chmods(files: List[Dict[str, Any]], roots: Roots) -> str:
    """The ``chmod`` commands that give drifted files (``mode``, ``recorded_mode``) back the
    mode patchkit left, by their absolute paths."""
    return "; ".join("chmod %s %s" % (f["recorded_mode"], roots.resolve(f["root"], f["path"]))
                     for f in files)


def mode_drift(recorded: FileRecord, mode: Optional[int]) -> Dict[str, str]:
    """A file entry's ``mode`` and ``recorded_mode`` (octal) when a chmod since changed the
    mode ``recorded`` left, else nothing: status, verify and rollback say it alike."""
    if mode is None or not recorded.chmodded(mode):
        return {}
    return {"mode": "%04o" % mode, "recorded_mode": "%04o" % (recorded.mode or 0)}


def drift_check(fix: str, drifted: List[Dict[str, Any]], state: State, roots: Roots,
                gone: bool = False) -> Dict[str, Any]:
    """The automatic verification a drifted fix fails (kind ``drift``); ``gone``: the fix's
    manifest left the catalog, so the way back is its record (rollback), not apply or refresh."""
    named = ["%s (%s)" % (f.get("where") or "%s:%s" % (f["root"], f["path"]), f["state"] + (
        ": mode %s, recorded %s" % (f["mode"], f["recorded_mode"]) if f.get("recorded_mode") else ""))
        for f in drifted[:SHOWN]]
    more = " and %d more" % (len(drifted) - SHOWN) if len(drifted) > SHOWN else ""
    if gone:
        todo = ("%s: %s; patchkit rollback --force %s restores its files from its record "
                "(the edits are lost)" % (fix, GONE, " ".join([fix, *state.requiring(fix)])))
    else:
        todo = drift_todo(fix, drifted, state, roots)
    detail = "changed since patchkit wrote them: %s%s. See patchkit status; %s" % (
        ", ".join(named), more, todo)
    where = ", ".join(f.get("where") or "%s:%s" % (f["root"], f["path"]) for f in drifted[:SHOWN]) + more
    return {"kind": "drift", "name": "files as patchkit wrote them", "ok": False,
            "detail": detail, "where": where}


def _detect(ws: Workspace, spec: FixSpec, beneath: Optional[Reader] = None) -> Dict[str, Any]:
    """Is an unrecorded fix's change already in the files (``presence.detect``)?"""
    from . import presence  # here: a status of fixes all recorded looks for none

    found = presence.detect(spec.files, ws.read, beneath)
    files = [] if found.state == NOT_APPLIED else [
        ws.roots.file(root, path, state=_file_state(whole, ws.entry(root, path).current))
        for (root, path), whole in found.files]
    return {"name": spec.name, "state": found.state, "version": spec.version, "applied_at": None,
            "files": files}


def _older(spec: FixSpec, recorded: Dict[str, FixRecord]) -> bool:
    """An applied version other than the catalog's (a refresh since): its record is all it has."""
    return not spec.recorded_only and str(recorded[spec.name].version) != str(spec.version)


def _own_checks(spec: FixSpec, by_record: bool, gone: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The fix's own verification checks that ``verify`` runs: none for a fix checked by its
    record alone, nor for a lost one (its change is not in the files: its checks would only
    fail, and make the lost fix a failed verification)."""
    return [] if by_record or spec.name in gone else list(spec.verification)


def verify(req: Request, store: Store) -> List[Dict[str, Any]]:
    from .checks import CheckContext, failure_lines, run_checks  # here: a status runs no check

    state = store.read_state()
    recorded = state.by_name()
    # applied_only: a fleet's verify of whatever each host applied, a fix whose manifest left
    # the catalog too (from its record, as a named one is), if the request has all its roots
    specs = [s for s in req.fixes if s.name in recorded or not req.applied_only]
    # a fix the release the target runs holds upstream, unrecorded: nothing to verify, as
    # status says not-needed (not "applied by hand": a sync forgot its record)
    needless = {s.name: {"name": s.name, "version": s.version, "outcome": "not-needed",
                         "detail": s.not_needed, "files": [], "preconditions": [],
                         "verification": []}
                for s in specs if s.not_needed and s.name not in recorded}
    order = [s.name for s in specs]
    specs = [s for s in specs if s.name not in needless]
    if req.applied_only:
        sent, have = {s.name for s in req.fixes}, {r.name for r in req.roots}
        specs += [parse_fix(recorded_only_fix(name, rec.version or 1))
                  for name, rec in recorded.items()
                  if name not in sent and {f.root for f in rec.files} <= have]
    missing = [s.name for s in specs if s.name not in recorded]
    if missing:
        ws = Workspace(req.roots)
        beneath = beneath_records(store, state, ws)
        present = [s.name for s in specs if s.name in missing and unrecorded(
            ws, s, req.roots, beneath=beneath and beneath(s.name))["state"] == PRESENT_UNRECORDED]
        absent = [n for n in missing if n not in present]
        said = []
        if absent:
            said.append("fix %s is not applied in %s; apply it before verifying it"
                        % (", ".join(absent), req.state_root.path))
        if present:
            said.append("fix %s is not applied by patchkit in %s: its change is in the files "
                        "already, unrecorded (present-unrecorded: a commit of the fork, or "
                        "applied by hand), and verify checks only what patchkit applied; see "
                        "patchkit status" % (", ".join(present), req.state_root.path))
        raise NotApplied("; ".join(said), fixes=missing, present_unrecorded=present)

    failures: List[Dict[str, Any]]
    out, failures = [], []
    ws = Workspace(req.roots)
    lost = lost_fixes(req.roots, state, ws, req.git)
    releases: Dict[str, Any] = {}  # each root's release, read once (an unserved catalog version)
    firsts: List[Tuple[Optional[Dict[str, Any]], Any]] = []  # each fix's drift result, files
    gone: Dict[str, Dict[str, Any]] = {}  # the fixes that fail as lost: status's entry of each
    jobs: List[Tuple[Dict[str, Any], CheckContext]] = []
    for spec in specs:
        # A check passing on edited files does not vouch for the fix as patchkit wrote it.
        drifted = drifted_files(req.roots, state, recorded[spec.name], ws)
        # An older version than the catalog's (a refresh since): the catalog's checks are for
        # its own change and the applied version's are not in it, so its record is what it has.
        by_record = spec.recorded_only or _older(spec, recorded)
        refuse_changed_series(spec, recorded[spec.name])  # else its checks are for another change
        first = drift_check(spec.name, drifted, state, req.roots, spec.recorded_only) if drifted else None
        if first is None and by_record:  # its record's check is all it has: listed
            first = {"kind": "drift", "name": "files as patchkit wrote them", "ok": True,
                     "detail": "every file holds the bytes its record names", "where": ""}
        if first is not None and not first["ok"] and spec.name in lost:
            # status's word on it, why and what to do: a lost fix is not a drifted one
            word = judged(req, store, ws, spec, recorded[spec.name], dict(lost[spec.name]),
                          releases)
            first = dict(first, detail="%s: %s" % (word["state"], word["detail"]))
            if word["state"] == "lost":  # a check of its own kind: its files were not edited
                first.update(kind="lost", name="the fix's change in its files")
                gone[spec.name] = word
        elif (first is not None and not first["ok"] and recorded[spec.name].version != spec.version
              and unserved_detail(req, spec, releases) is None  # else apply would refuse it
              and _holds_catalog(req, store, ws, recorded[spec.name], spec)):
            first = dict(first, detail=(
                "the files hold v%d's change, not the recorded v%s's (edited by hand, or "
                "refreshed from here): patchkit apply %s records v%d, writing nothing"
                % (spec.version, recorded[spec.name].version, spec.name, spec.version)))
        firsts.append((first, drifted))
        ctx = CheckContext(spec.name, req.roots, req.python, spec.scripts, req.roots.read)
        jobs.extend((check, ctx) for check in _own_checks(spec, by_record, gone))
    checked = iter(run_checks(jobs))  # every fix's at once, as an apply's: a script overlaps the greps
    for spec, (first, drifted) in zip(specs, firsts):
        by_record = spec.recorded_only or _older(spec, recorded)
        results = ([first] if first else []) + [
            next(checked) for _ in _own_checks(spec, by_record, gone)]
        failures.extend(dict(r, fix=spec.name) for r in results if not r["ok"])
        out.append({"name": spec.name, "version": recorded[spec.name].version,
                    "outcome": "verified" if all(r["ok"] for r in results) else "failed",
                    "files": [], "preconditions": [], "verification": results, "drifted": drifted})
        if spec.name in gone:  # why, as an apply that applies it again says it; and the advice
            out[-1].update(lost=gone[spec.name]["lost"], detail=gone[spec.name]["detail"],
                           drifted=[f for f in gone[spec.name]["files"] if f["state"] != "ok"])
            # its files as status says them: reinstalled or replaced, not drifted
        elif spec.recorded_only:
            out[-1]["detail"] = GONE
        elif by_record and spec.name not in lost:  # a lost fix's detail says why, and what to do
            out[-1]["detail"] = OLDER % {"fix": spec.name, "old": recorded[spec.name].version,
                                         "new": spec.version}
    if needless:  # in the order asked
        done = {o["name"]: o for o in out}
        out = [needless.get(n) or done[n] for n in order if n in needless or n in done] + [
            o for o in out if o["name"] not in order]
    lost_names = sorted({f["fix"] for f in failures if f["fix"] in gone})
    if failures and all(f["kind"] in ("drift", "lost") for f in failures):
        drifted_count = len(failures) - len(lost_names)
        if not drifted_count:
            raise FixLost("%d applied fix(es) lost: their files hold what a reinstall or another "
                          "release put there, not the fix (nothing was changed):\n%s"
                          % (len(lost_names), failure_lines(failures)),
                          failures=failures, fixes=out, lost=lost_names)
        raise DriftError("%d applied fix(es) drifted: files changed since patchkit wrote them%s "
                         "(nothing was changed):\n%s" % (
                             drifted_count, ", and %d lost" % len(lost_names) if lost_names else "",
                             failure_lines(failures)),
                         failures=failures, fixes=out, lost=lost_names)
    if failures:
        raise VerificationFailed("%d verification check(s) failed (nothing was changed):\n%s"
                                 % (len(failures), failure_lines(failures)), failures=failures,
                                 fixes=out, lost=lost_names)
    return out
