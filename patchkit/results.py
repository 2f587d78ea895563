"""What an operation did: frozen dataclasses built from the engine's result (docs/design.md,
Records)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from .engine.recordbase import Record, record_dataclass
from .errors import PatchkitError, error_from_dict


@record_dataclass(frozen=True)
class CheckResult(Record):
    """One precondition or verification as the engine ran it."""

    kind: str
    name: str
    ok: bool
    detail: str
    where: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CheckResult":
        return cls(kind=str(d.get("kind", "")), name=str(d.get("name") or ""), ok=bool(d.get("ok")),
                   detail=str(d.get("detail") or ""), where=str(d.get("where") or ""))


@record_dataclass(frozen=True)
class HunkPlacement(Record):
    """Where one hunk of a patch landed (``offset``: lines from where the patch said)."""

    patch: str
    index: int
    expected_line: int
    line: int
    offset: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HunkPlacement":
        return cls(patch=str(d.get("patch", "")), index=int(d.get("index", 0)),
                   expected_line=int(d.get("expected_line", 0)), line=int(d.get("line", 0)),
                   offset=int(d.get("offset", 0)))


@record_dataclass(frozen=True)
class FileOutcome(Record):
    """One file an operation wrote (or would write, in a dry run)."""

    root: str
    path: str
    op: str
    before_sha256: str | None
    after_sha256: str | None
    hunks: tuple[HunkPlacement, ...]
    diff: str
    where: str = ""  # root:path as the file lies in its root (an installed package's sglang/...)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileOutcome":
        return cls(root=str(d.get("root", "")), path=str(d.get("path", "")),
                   op=str(d.get("op", "modify")), before_sha256=d.get("before_sha256"),
                   after_sha256=d.get("after_sha256"),
                   hunks=tuple(HunkPlacement.from_dict(h) for h in d.get("hunks") or ()),
                   diff=str(d.get("diff") or ""),
                   where=str(d.get("where") or f"{d.get('root', '')}:{d.get('path', '')}"))


@record_dataclass(frozen=True)
class FixOutcome(Record):
    """What happened to one fix: its outcome, files and checks (docs/design.md, "Engine result")."""

    name: str
    version: int | None
    outcome: str
    files: tuple[FileOutcome, ...]
    preconditions: tuple[CheckResult, ...]
    verification: tuple[CheckResult, ...]
    drifted: tuple[Mapping[str, Any], ...] = ()  # {root, path, state}: files no longer as written
    from_version: int | None = None  # ``upgraded``/``would-upgrade``: the version taken out
    commits: tuple[Mapping[str, str], ...] = ()  # {root, sha}: commits the run made for the fix
    reverts: Mapping[str, Any] | None = None  # {root, commit, title, found_by}: the commit undone
    lost: str | None = None  # applied afresh: why its earlier record was lost (a reinstall, a release checked out)
    detail: str | None = None  # ``not-needed``: why ("in upstream since 0.5.23 ...")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FixOutcome":
        return cls(name=str(d.get("name", "")), version=d.get("version"),
                   outcome=str(d.get("outcome", "")),
                   files=tuple(FileOutcome.from_dict(f) for f in d.get("files") or ()),
                   preconditions=tuple(CheckResult.from_dict(c) for c in d.get("preconditions") or ()),
                   verification=tuple(CheckResult.from_dict(c) for c in d.get("verification") or ()),
                   drifted=tuple(d.get("drifted") or ()), from_version=d.get("from_version"),
                   commits=tuple(d.get("commits") or ()), reverts=d.get("revert") or None,
                   lost=d.get("lost"), detail=d.get("detail"))


@record_dataclass(frozen=True)
class FixState(Record):
    """One fix as ``status`` sees it on the target."""

    name: str
    state: str
    version: int | None
    applied_at: str | None
    files: tuple[Mapping[str, Any], ...]
    catalog_version: int | None = None  # the catalog's version of a recorded fix (``outdated``)
    detail: str | None = None  # why a fix is ``lost`` (a reinstall, or a release checked out, underneath)
    releases: tuple[str, ...] = ()  # the releases the catalog's variant for this target serves

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FixState":
        return cls(name=str(d.get("name", "")), state=str(d.get("state", "")),
                   version=d.get("version"), applied_at=d.get("applied_at"),
                   files=tuple(d.get("files") or ()), catalog_version=d.get("catalog_version"),
                   detail=d.get("detail"), releases=tuple(d.get("releases") or ()))


@record_dataclass(frozen=True)
class RunningProcess(Record):
    """A process using a root of the target (``status``; docs/state.md, Running processes)."""

    pid: int
    command: str
    started_at: str | None
    roots: tuple[str, ...]
    via: str
    state: str  # "current" | "restart-pending"
    changed: tuple[str, ...] = ()  # root:path changed after it started (at most 5)
    changed_count: int = 0

    @property
    def pending(self) -> bool:
        return self.state == "restart-pending"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RunningProcess":
        return cls(pid=int(d.get("pid") or 0), command=str(d.get("command", "")),
                   started_at=d.get("started_at"), roots=tuple(d.get("roots") or ()),
                   via=str(d.get("via", "")), state=str(d.get("state", "")),
                   changed=tuple(d.get("changed") or ()), changed_count=int(d.get("changed_count") or 0))


@record_dataclass(frozen=True)
class Running(Record):
    """What runs from the target: ``available`` False when ``/proc`` could not be read
    (``detail`` says why; nothing is claimed then)."""

    available: bool
    detail: str | None
    processes: tuple[RunningProcess, ...]
    unreadable: tuple[Mapping[str, Any], ...]
    stale_pyc: tuple[Mapping[str, Any], ...]

    @property
    def pending(self) -> tuple[RunningProcess, ...]:
        return tuple(p for p in self.processes if p.pending)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Running | None":
        if not d:
            return None  # an engine of before this record
        return cls(available=bool(d.get("available")), detail=d.get("detail"),
                   processes=tuple(RunningProcess.from_dict(p) for p in d.get("processes") or ()),
                   unreadable=tuple(d.get("unreadable") or ()), stale_pyc=tuple(d.get("stale_pyc") or ()))


@record_dataclass(frozen=True)
class OpResult(Record):
    """The outcome of one engine run on one target."""

    op: str
    ok: bool
    dry_run: bool
    target: str
    fixes: tuple[FixOutcome, ...]
    recovered: tuple[Mapping[str, Any], ...]
    status: tuple[FixState, ...]
    raw: Mapping[str, Any]
    # status, sync: fixes not looked at, each with the roots of it the target was not given
    left_out: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # status, verify, sync: those the target records as applied (not looked at, not verified,
    # not synced)
    unseen: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # status: catalog.BrokenFix of each manifest that cannot be read; rollback: of each fix it
    # rolled back from its record because its manifest cannot be read
    broken: tuple[Any, ...] = ()
    running: Running | None = None  # status only: the processes using the roots

    @property
    def txn(self) -> str | None:
        """The transaction this run committed and kept an undo point for, which ``api.undo``
        takes (None: it wrote nothing, or kept none: a change with git commits)."""
        return self.raw.get("txn") or None

    @property
    def release(self) -> str | None:
        """The SGLang release the target runs, as ``status`` read it (None: unknown)."""
        return (self.raw.get("status") or {}).get("release")

    @classmethod
    def from_engine(cls, raw: Mapping[str, Any], target: str) -> "OpResult":
        status = raw.get("status") or {}
        return cls(op=str(raw.get("op", "")), ok=bool(raw.get("ok")),
                   dry_run=bool(raw.get("dry_run")), target=target,
                   fixes=tuple(FixOutcome.from_dict(f) for f in raw.get("fixes") or ()),
                   recovered=tuple(raw.get("recovered") or ()),
                   status=tuple(FixState.from_dict(f) for f in status.get("fixes") or ()), raw=raw,
                   running=Running.from_dict(status.get("running")))

    def to_json(self) -> dict[str, Any]:
        out = dict(self.raw, target=self.target)
        seen = out.get("status")
        if isinstance(seen, Mapping) and "left_out" in seen:
            # the engine's list of recorded fixes on roots not given is what ``left_out`` and
            # ``unseen`` below are made of (api.status): a document says each fact once
            out["status"] = {k: v for k, v in seen.items() if k != "left_out"}
        if self.op == "status" or out.get("op") == "sync" or self.left_out:  # roots not given
            out["left_out"] = [{"name": name, "missing_roots": list(roots)}
                               for name, roots in self.left_out]
        if self.op == "status" or self.broken:  # a rollback's: manifests it did without
            out["broken"] = [b.to_json() for b in self.broken]
        if self.op in ("status", "verify") or out.get("op") == "sync":
            out["unseen"] = [{"name": name, "missing_roots": list(roots)}
                             for name, roots in self.unseen]
        if self.op in ("apply", "status") and self.ok and not self.dry_run:
            out["summary"] = self.summary()
        return out

    def summary(self) -> dict[str, Any]:
        """What an apply put on the target, or what status finds applied there, small enough
        for an image label: ``{"sglang": "0.5.23" | null, "fixes": {name: version}}``; the
        ``status`` of a target equals the ``apply`` that patched it (docs/containers.md)."""
        if self.op == "apply":
            fixes = {f.name: f.version for f in self.fixes
                     if f.outcome in ("applied", "already-applied", "upgraded")}
        else:
            fixes = {s.name: s.version for s in self.status if s.state in ("applied", "outdated")}
        installed = (self.raw.get("installed") or {}).get("sglang") or {}
        release = (self.raw.get("release") or {}).get("sglang")  # a checkout's, as a precondition reads it
        return {"sglang": installed.get("version") or release, "fixes": fixes}


def check_result(raw: Mapping[str, Any], target: str) -> OpResult:
    """Turn an engine result into an :class:`OpResult`, raising its error if it failed; the
    error carries the partial result as ``err.result`` (fixes from its ``details["fixes"]``)."""
    result = OpResult.from_engine(raw, target)
    err_dict = raw.get("error")
    if err_dict:
        checked = (err_dict.get("details") or {}).get("fixes")
        if not result.fixes and isinstance(checked, list):
            fixes = tuple(FixOutcome.from_dict(f) for f in checked if isinstance(f, Mapping))
            result = replace(result, fixes=fixes)
        err: PatchkitError = error_from_dict(err_dict)
        err.result = result  # type: ignore[attr-defined]
        raise err
    return result


def file_where(f: Mapping[str, Any]) -> str:
    """``root:path`` of a result's file as it lies in its root (an installed package's
    ``sglang:sglang/x.py``): the engine's ``where``, else the patch's root and path."""
    return str(f.get("where") or f"{f.get('root')}:{f.get('path')}")
