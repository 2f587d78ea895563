"""Fleets through Ansible (docs/fleet.md): the controller renders each engine request once;
every host runs the same engine, through the shipped collection's ``patchkit.fleet.engine``."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..api import unread_rows
from ..catalog import BrokenFix, Catalog
from ..errors import HostUnreachable, PatchkitError, SessionFailed, UsageError, VerificationFailed
from ..hooks import refuse_hooks_on_undo
from ..request_builder import Unreadable, build_request
from .ansible import COLLECTIONS_PATH, ENGINE_MODULE, Host, engine_task, inventory_hosts, run_playbook
from .rollout import (ROLLOUT_OPS, FleetOptions, FleetReport, HostReport, Rollout, host_error,
                      parse_waves, split_waves)

__all__ = ["COLLECTIONS_PATH", "ROLLOUT_OPS", "FleetOptions", "FleetReport", "HostReport", "Survey",
           "parse_waves", "plan", "rollout", "split_waves", "survey"]


def plan(catalog: Catalog, op: str, names: Sequence[str], *, roots: dict[str, str] | None = None,
         with_deps: bool = False, allow_inactive: bool = False, dry_run: bool = False,
         force: bool = False, lock_timeout: float = 30.0, commit: bool = False,
         git: bool = True, sync: bool = False, applied_only: bool = False,
         unreadable: Unreadable | None = None) -> dict[str, Any]:
    """The engine request of ``op`` over ``names``, for ``patchkit.fleet.engine``. It holds no
    roots: each host gives its own (``patchkit_target``, ``patchkit_roots``); ``roots`` names
    the ones the hosts have, for the checks made here. ``commit`` and ``git`` as for
    :func:`patchkit.api.apply`. An ``undo`` names no fix: each host puts back its last change."""
    if op == "undo":
        _refuse_undo_fixes(names)
    # a verify may name a fix whose manifest left the catalog, as one target's may: each host
    # verifies it from its record (one that records no such fix: not applied)
    held = set(catalog.names()) if op == "verify" else None
    gone = [(n, 1) for n in names if held is not None and n not in held]
    if op == "apply":
        fixes = catalog.apply_order(list(names), with_deps=with_deps, allow_inactive=allow_inactive)
    elif op == "rollback":
        fixes = catalog.rollback_order(list(names))
    elif op == "status":
        fixes = catalog.all() if not names else [catalog.get(n) for n in names]
    else:
        fixes = [catalog.get(n) for n in names if held is None or n in held]
    if roots is None:
        roots = {"sglang": "/"} | {r: "/" for f in fixes for r in f.roots if r != "sglang"}
    request = build_request(catalog, fixes, op=op, roots=roots, state_root="sglang", python=None,
                            dry_run=dry_run, force=force, lock_timeout=lock_timeout,
                            commit=commit and op == "apply", git=git, sync=sync,
                            applied_only=applied_only, recorded_only=gone, unreadable=unreadable)
    request["roots"] = {}  # never a placeholder a host could take for a real path
    return request


def _refuse_undo_fixes(names: Sequence[str]) -> None:
    """An undo names no fix: it puts back the host's last change, whatever fixes it changed."""
    if names:
        raise UsageError(f"an undo names no fix (given: {', '.join(names)}): it puts each host "
                         "back as before its last apply, sync or rollback, every fix that change "
                         "made; leave the names out")


def rollout(catalog: Catalog, op: str, names: Sequence[str], *, inventory: str,
            limit: str | None = None, options: FleetOptions = FleetOptions(),
            with_deps: bool = False, allow_inactive: bool = False, force: bool = False,
            lock_timeout: float = 30.0, commit: bool = False, git: bool = True,
            sync: bool = False,
            progress: Callable[[str], None] = lambda _line: None) -> FleetReport:
    """``apply`` or ``rollback`` of ``names``, or ``undo`` (no names: each host's last change
    put back), on every host of ``inventory`` (after ``limit``): preflight, then waves
    (docs/fleet.md). Hosts failing are in the report, not raised. ``commit`` and ``git`` as for
    :func:`patchkit.api.apply`; ``git`` holds for the undo too. An undo runs no hooks
    (``options.health_cmd``, ``after_cmd``): it has no undo of its own to run if one failed."""
    if op not in ROLLOUT_OPS:
        raise UsageError(f"a fleet rollout applies, rolls back or undoes, not {op!r}")
    if op == "undo":
        _refuse_undo_fixes(names)
        refuse_hooks_on_undo(after_cmd=options.after_cmd, health_cmd=options.health_cmd)
        names = []
    else:
        names = [f.name for f in (catalog.apply_order(list(names), with_deps=with_deps,
                                                      allow_inactive=allow_inactive)
                                  if op == "apply" else catalog.rollback_order(list(names)))]
    hosts = inventory_hosts(inventory, limit)
    _check_roots(catalog, names, hosts)

    def request(what: str, fixes: list[str], dry_run: bool) -> dict[str, Any]:
        return plan(catalog, what, fixes, dry_run=dry_run, force=force, lock_timeout=lock_timeout,
                    allow_inactive=allow_inactive, commit=commit, git=git,
                    sync=sync and what == "apply")

    with tempfile.TemporaryDirectory(prefix="patchkit-fleet-") as workdir:
        return Rollout(op=op, names=names, hosts=hosts, inventory=inventory, workdir=Path(workdir),
                       request=request, options=options, progress=progress).run()


@dataclass(frozen=True)
class Survey:
    """``status`` or ``verify`` on every host: one report per host, its engine result inside.
    ``broken`` (a status): the fixes it could not read, as one target's status lists them."""

    op: str
    hosts: tuple[HostReport, ...]
    broken: tuple[BrokenFix, ...] = ()

    @property
    def error(self) -> PatchkitError | None:
        """A verify's failure, as the error a script reads (``--json``) and its exit code: a
        reached host whose verify failed (that says more), else a host unreachable. A status
        whose matrix has a host's answer has none: unreachable hosts included, it is its
        answer; one where no host answered is the hosts' failure (as one ``ssh://`` target's
        is): all unreachable, ``HostUnreachable``, else ``SessionFailed``."""
        failed = [h.host for h in self.hosts if h.state not in ("ok", "unreachable")]
        unreachable = [h.host for h in self.hosts if h.state == "unreachable"]
        if self.op != "verify":
            if not self.hosts or any(h.state == "ok" for h in self.hosts):
                return None
            said = "no host answered the %s: %s; their rows say why" % (self.op, "; ".join(
                "%d %s (%s)" % (len(hs), what, ", ".join(hs))
                for what, hs in (("failed", failed), ("unreachable", unreachable)) if hs))
            if failed:
                return SessionFailed(said, hosts=failed + unreachable)
            return HostUnreachable(said, hosts=unreachable)
        if failed:
            return VerificationFailed("verify failed on %d host(s): %s (their rows say why)"
                                      % (len(failed), ", ".join(failed)), hosts=failed)
        if unreachable:
            return HostUnreachable("%d host(s) unreachable, not verified: %s"
                                   % (len(unreachable), ", ".join(unreachable)), hosts=unreachable)
        return None

    def to_json(self) -> dict[str, Any]:
        error = self.error
        out: dict[str, Any] = {"op": self.op, "ok": error is None,
                               "hosts": [h.to_json() for h in self.hosts]}
        if error is not None:
            out["error"] = error.to_dict()
        if self.op == "status":
            out["broken"] = [b.to_json() for b in self.broken]
        return out


def survey(catalog: Catalog, op: str, names: Sequence[str] = (), *, inventory: str,
           limit: str | None = None, forks: int = 5, lock_timeout: float = 30.0) -> Survey:
    """Run the read-only ``op`` (status or verify) on every host at once; writes nothing, except
    that the engine finishes or undoes a run a killed controller left on a host."""
    hosts = inventory_hosts(inventory, limit)
    if op == "verify":
        _check_roots(catalog, list(names), hosts)
    by_roots: dict[tuple[str, ...], list[Host]] = {}
    for host in hosts:
        by_roots.setdefault(tuple(sorted(host.roots)), []).append(host)
    reports: dict[str, HostReport] = {}
    # a status, and a verify naming no fix, go on past a fix it cannot read, as one target's
    # do (api.status, api.verify): a host that applied one verifies it from its record
    readable, broken = catalog.readable()
    broken = broken if op == "status" else []
    unreadable: Unreadable = {}
    with tempfile.TemporaryDirectory(prefix="patchkit-fleet-") as tmp:
        workdir, plays = Path(tmp), []
        for root_names, group in by_roots.items():
            fixes = list(names) or [f.name for f in readable if set(f.roots) <= set(root_names)]
            # a verify naming no fix: each host verifies the fixes it has applied, by their
            # checks and records (a series that cannot be read is not needed: unreadable={})
            request = plan(catalog, op, fixes, roots={r: "/" for r in root_names},
                           lock_timeout=lock_timeout, applied_only=op == "verify" and not names,
                           unreadable=unreadable if op == "status" else {})
            plays.append({"name": f"patchkit {op}", "hosts": ",".join(h.name for h in group),
                          "gather_facts": False,
                          "tasks": [engine_task(workdir, request, f"patchkit {op}")]})
        run = run_playbook(plays, inventory=inventory, hosts=[h.name for h in hosts], forks=forks,
                           workdir=workdir, writes=False)
    for host in hosts:
        task = next((t for t in run.of(host.name) if t.action == ENGINE_MODULE), None)
        if task is None or task.status == "unreachable":
            reports[host.name] = HostReport(host.name, "unreachable", task.msg if task else "no result")
        elif task.status != "ok":
            reports[host.name] = HostReport(host.name, "failed", host_error(task), result=task.patchkit)
        else:
            reports[host.name] = HostReport(host.name, "ok", "", result=task.patchkit)
    found = {b.name: b for b in broken}
    for name, report in reports.items():
        seen = dict(((report.result or {}).get("status")) or {})
        seen["fixes"], torn = unread_rows(seen.get("fixes") or [], unreadable)
        found.update((b.name, b) for b in torn)
        reports[name] = replace(report, result=dict(report.result or {}, status=seen))
    return Survey(op=op, hosts=tuple(reports[h.name] for h in hosts),
                  broken=tuple(found[n] for n in sorted(found)))


def _check_roots(catalog: Catalog, names: Sequence[str], hosts: Sequence[Host]) -> None:
    held = set(catalog.names())
    for host in hosts:
        for name in (n for n in names if n in held):  # a gone one: each host's record says
            missing = [r for r in catalog.get(name).roots if r not in host.roots]
            if missing:
                raise UsageError(f"fix '{name}' uses the root(s) {', '.join(missing)}, which host "
                                 f"{host.name} does not define: set patchkit_roots for it in the "
                                 "inventory, e.g. patchkit_roots: {serve: /path}", host=host.name,
                                 fix=name, roots=missing)
