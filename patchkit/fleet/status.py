"""The fleet's status rules (docs/fleet.md): the host x fix matrix a survey gives, what runs on
each host, whether the fleet has converged, and per fix the hosts of each version (`log
--inventory`). The CLI only draws what these return."""

from __future__ import annotations

from typing import Any

from ..engine.contract import APPLIED, NOT_APPLIED, OUTDATED, RECORDED, UNHEALTHY

#: Cells of a fleet status (a fix's state, or a host's) that make ``--exit-code`` fail.
NOT_CONVERGED = UNHEALTHY | {"unreachable", "failed"}
Cells = dict[str, dict[str, dict[str, Any]]]
#: The cell of a fix a host records on a root the inventory does not give it (``patchkit_roots``):
#: applied there, its files not looked at, as a single target's status says on stderr.
NOT_LOOKED_AT = "not-looked-at"


def status_cells(result: Any, expected: Any = (), inactive: Any = ()) -> Cells:
    """host -> fix -> {state, version}: the fleet status matrix. A host that failed or was not
    reached has that state and its reason (detail) in every fix's cell: the fixes the reached hosts
    report, else (no host answered) ``expected``, the fixes asked about. A fix of ``inactive``
    (the catalog's dead and superseded fixes; empty for ``status --all``) is no column where
    every host that answered has it ``not-applied``, as one target's status shows no row of a
    fix not applied: a whole column of ``not-applied`` for a fix nobody should apply says
    nothing, while a host that carries it keeps it in the matrix."""
    rows: Cells = {}
    for host in result.hosts:
        status = ((host.result or {}).get("status") or {}).get("fixes") or []
        if host.state != "ok":
            rows[host.host] = {"*": {"state": host.state, "detail": host.detail}}
            continue
        seen = (host.result or {}).get("status") or {}
        release = seen.get("release")
        rows[host.host] = {f["name"]: {"state": f["state"], "version": f.get("version")
                                       if f["state"] in RECORDED else None, "release": release}
                           for f in status}
        for out in seen.get("left_out") or ():  # recorded there, on a root the host was not given
            rows[host.host].setdefault(str(out["name"]), {
                "state": NOT_LOOKED_AT, "version": None, "release": release,
                "detail": "applied here, not looked at: root %s not given (set patchkit_roots "
                          "for the host in the inventory)" % ", ".join(out.get("roots") or ())})
    unheld = {fix for fix in inactive if all(
        row.get(fix, {"state": NOT_APPLIED})["state"] == NOT_APPLIED
        for row in rows.values() if "*" not in row)}
    for row in rows.values():
        for fix in unheld:
            row.pop(fix, None)
    fixes = cell_fixes(rows) or sorted(set(expected) - set(inactive)) or ["-"]
    for row in rows.values():
        if "*" in row:
            cell = row.pop("*")
            row.update({fix: dict(cell) for fix in fixes})
    return rows


def cell_fixes(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The fixes of a matrix, in name order."""
    return sorted({fix for row in rows.values() for fix in row if fix != "*"})


def by_release(cells: Cells) -> dict[str, list[str]]:
    """release -> the hosts running it ("unknown": unreachable, or no release read)."""
    out: dict[str, list[str]] = {}
    for host, row in cells.items():
        release = next((c.get("release") for c in row.values() if c.get("release")), None)
        out.setdefault(release or "unknown", []).append(host)
    return out


def running_cells(result: Any) -> dict[str, str]:
    """host -> what runs from it (status ``running``, docs/cli.md): ``restart pending: PID,...``,
    ``current``, ``none``, ``not looked at`` (no /proc), or ``-`` (not reached, an older engine)."""
    out = {}
    for host in result.hosts:
        run = ((host.result or {}).get("status") or {}).get("running")
        if host.state != "ok" or not run:
            out[host.host] = "-"
        elif not run.get("available"):
            out[host.host] = "not looked at"
        else:
            procs = run.get("processes") or []
            waiting = [str(p["pid"]) for p in procs if p.get("state") == "restart-pending"]
            out[host.host] = (f"restart pending: {','.join(waiting)}" if waiting
                              else "current" if procs else "none")
    return out


def converged(result: Any, cells: Cells, running: dict[str, str], running_gate: bool) -> bool:
    """Whether the fleet has converged: every host answered, no fix needs attention, one version
    per fix among the hosts of one release (each release has its variant) and, with
    ``running_gate`` (``--running``), nothing runs old code."""
    if any(c["state"] in NOT_CONVERGED for row in cells.values() for c in row.values()):
        return False
    if any(h.state != "ok" for h in result.hosts):
        return False
    versions: dict[tuple[str, Any], set[tuple[Any, Any]]] = {
        (fix, c.get("release")): set() for row in cells.values() for fix, c in row.items()}
    for row in cells.values():
        for fix, c in row.items():
            if c["state"] != "unreachable":
                versions[(fix, c.get("release"))].add((c["state"], c.get("version")))
    if any(len(v) > 1 for v in versions.values()):
        return False
    return not (running_gate and any(v.startswith("restart pending") or v == "not looked at"
                                     for v in running.values()))


def lineage(catalog: Any, result: Any, fix: str | None) -> dict[str, Any]:
    """`log --inventory`: per fix (``fix``, or every fix of the catalog) each version and the
    hosts that run it; the hosts not reached, and those reached whose engine did not answer."""
    cells = status_cells(result)
    unreachable = [h.host for h in result.hosts if h.state == "unreachable"]
    failed = {h.host: h.detail for h in result.hosts if h.state not in ("ok", "unreachable")}
    fixes = []
    for name in [fix] if fix else [f.name for f in catalog.all()]:
        entry: dict[str, Any] = {"name": name, "catalog_version": catalog.get(name).version,
                                 "hosts": {}}
        for host, row in cells.items():
            cell = row.get(name)
            if host in unreachable or host in failed or cell is None:
                continue
            key = f"v{cell['version']}" if cell["state"] in (APPLIED, OUTDATED) else cell["state"]
            entry["hosts"].setdefault(key, []).append(host)
        fixes.append(entry)
    return {"fixes": fixes, "unreachable": unreachable, "failed": failed}
