"""What an operation did, as frozen dataclasses built from the engine's result (docs/design.md).

Declared like :mod:`patchkit.catalog.model`'s records (``@record``, a hand-written ``__init__``): a
frozen ``@dataclass`` generates its methods at import, a large part of a small run's start.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from .errors import PatchkitError, error_from_dict
from .catalog.model import Frozen, record


@record
class CheckResult(Frozen):
    """One precondition or verification as the engine ran it."""

    kind: str
    name: str
    ok: bool
    detail: str
    where: str

    def __init__(self, kind: str, name: str, ok: bool, detail: str, where: str) -> None:
        self.__dict__.update(kind=kind, name=name, ok=ok, detail=detail, where=where)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CheckResult":
        return cls(
            kind=str(d.get("kind", "")),
            name=str(d.get("name") or ""),
            ok=bool(d.get("ok")),
            detail=str(d.get("detail") or ""),
            where=str(d.get("where") or ""),
        )


@record
class HunkPlacement(Frozen):
    """Where one hunk of a patch landed (``offset``: lines from where the patch said)."""

    patch: str
    index: int
    expected_line: int
    line: int
    offset: int

    def __init__(self, patch: str, index: int, expected_line: int, line: int, offset: int) -> None:
        self.__dict__.update(patch=patch, index=index, expected_line=expected_line, line=line,
                             offset=offset)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HunkPlacement":
        return cls(
            patch=str(d.get("patch", "")),
            index=int(d.get("index", 0)),
            expected_line=int(d.get("expected_line", 0)),
            line=int(d.get("line", 0)),
            offset=int(d.get("offset", 0)),
        )


@record
class FileChange(Frozen):
    """One file an operation wrote (or would write, in a dry run)."""

    root: str
    path: str
    op: str
    before_sha256: str | None
    after_sha256: str | None
    hunks: tuple[HunkPlacement, ...]
    diff: str

    def __init__(self, root: str, path: str, op: str, before_sha256: str | None,
                 after_sha256: str | None, hunks: tuple[HunkPlacement, ...], diff: str) -> None:
        self.__dict__.update(root=root, path=path, op=op, before_sha256=before_sha256,
                             after_sha256=after_sha256, hunks=hunks, diff=diff)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileChange":
        return cls(
            root=str(d.get("root", "")),
            path=str(d.get("path", "")),
            op=str(d.get("op", "modify")),
            before_sha256=d.get("before_sha256"),
            after_sha256=d.get("after_sha256"),
            hunks=tuple(HunkPlacement.from_dict(h) for h in d.get("hunks") or ()),
            diff=str(d.get("diff") or ""),
        )


@record
class FixOutcome(Frozen):
    """What happened to one fix: its outcome, files and checks.

    ``drifted`` (already-applied and verify): the recorded files that no longer hold what
    patchkit wrote, each ``{root, path, state}`` with state ``drifted`` or ``missing``.
    ``commits``: the commits the run made for the fix (``apply --commit``, the rollback of a
    committed fix), each ``{root, sha}``; ``reverts``: the commit a revert undid, ``{root,
    commit, title, found_by}`` (a ``[revert]`` fix, the rollback of a committed fix), or None."""

    name: str
    version: int | None
    outcome: str
    files: tuple[FileChange, ...]
    preconditions: tuple[CheckResult, ...]
    verification: tuple[CheckResult, ...]
    drifted: tuple[Mapping[str, Any], ...]
    from_version: int | None  # ``upgraded``/``would-upgrade``: the version taken out
    commits: tuple[Mapping[str, str], ...]
    reverts: Mapping[str, Any] | None

    def __init__(self, name: str, version: int | None, outcome: str, files: tuple[FileChange, ...],
                 preconditions: tuple[CheckResult, ...],
                 verification: tuple[CheckResult, ...],
                 drifted: tuple[Mapping[str, Any], ...] = (),
                 from_version: int | None = None,
                 commits: tuple[Mapping[str, str], ...] = (),
                 reverts: Mapping[str, Any] | None = None) -> None:
        self.__dict__.update(name=name, version=version, outcome=outcome, files=files,
                             preconditions=preconditions, verification=verification,
                             drifted=drifted, from_version=from_version, commits=commits,
                             reverts=reverts)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FixOutcome":
        return cls(
            name=str(d.get("name", "")),
            version=d.get("version"),
            outcome=str(d.get("outcome", "")),
            files=tuple(FileChange.from_dict(f) for f in d.get("files") or ()),
            preconditions=tuple(CheckResult.from_dict(c) for c in d.get("preconditions") or ()),
            verification=tuple(CheckResult.from_dict(c) for c in d.get("verification") or ()),
            drifted=tuple(d.get("drifted") or ()),
            from_version=d.get("from_version"),
            commits=tuple(d.get("commits") or ()),
            reverts=d.get("revert") or None,
        )


@record
class FixState(Frozen):
    """One fix as ``status`` sees it on the target."""

    name: str
    state: str
    version: int | None
    applied_at: str | None
    files: tuple[Mapping[str, Any], ...]
    catalog_version: int | None  # the catalog's version of a recorded fix (``outdated``)

    def __init__(self, name: str, state: str, version: int | None, applied_at: str | None,
                 files: tuple[Mapping[str, Any], ...], catalog_version: int | None = None) -> None:
        self.__dict__.update(name=name, state=state, version=version, applied_at=applied_at,
                             files=files, catalog_version=catalog_version)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FixState":
        return cls(
            name=str(d.get("name", "")),
            state=str(d.get("state", "")),
            version=d.get("version"),
            applied_at=d.get("applied_at"),
            files=tuple(d.get("files") or ()),
            catalog_version=d.get("catalog_version"),
        )


@record
class OpResult(Frozen):
    """The outcome of one engine run on one target."""

    op: str
    ok: bool
    dry_run: bool
    target: str
    fixes: tuple[FixOutcome, ...]
    recovered: tuple[Mapping[str, Any], ...]
    status: tuple[FixState, ...]
    raw: Mapping[str, Any]

    def __init__(self, op: str, ok: bool, dry_run: bool, target: str,
                 fixes: tuple[FixOutcome, ...], recovered: tuple[Mapping[str, Any], ...],
                 status: tuple[FixState, ...], raw: Mapping[str, Any]) -> None:
        self.__dict__.update(op=op, ok=ok, dry_run=dry_run, target=target, fixes=fixes,
                             recovered=recovered, status=status, raw=raw)

    @classmethod
    def from_engine(cls, raw: Mapping[str, Any], target: str) -> "OpResult":
        status = raw.get("status") or {}
        return cls(
            op=str(raw.get("op", "")),
            ok=bool(raw.get("ok")),
            dry_run=bool(raw.get("dry_run")),
            target=target,
            fixes=tuple(FixOutcome.from_dict(f) for f in raw.get("fixes") or ()),
            recovered=tuple(raw.get("recovered") or ()),
            status=tuple(FixState.from_dict(f) for f in status.get("fixes") or ()),
            raw=raw,
        )

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw, target=self.target)


def check_result(raw: Mapping[str, Any], target: str) -> OpResult:
    """Turn an engine result into an :class:`OpResult`, raising its error if it failed.

    The raised error carries the partial result as ``err.result`` so callers can show which
    checks passed and which did not: a failed run has no ``fixes`` of its own, so they are
    taken from the error's ``details["fixes"]`` (every check of every fix, as the engine
    reported them with a precondition or verification failure).
    """
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
