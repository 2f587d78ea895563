"""The fleet side of `apply`, `rollback`, `verify`, `status` and `log` (``--inventory``), and
`patchkit plan`: what the controller renders for the collection's patchkit.fleet.engine (docs/fleet.md)."""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from ..engine.contract import OPS
from ..errors import EXIT_CHECK_FAILED, UsageError
from . import render
from .common import State, command, suggests, write_options

#: ``--inventory``, ``--limit`` and ``--forks``: every command that can run on a fleet.
INVENTORY_OPTIONS = (
    click.option("--inventory", "-i", metavar="INVENTORY",
                 help="Run on every host of this Ansible inventory (docs/fleet.md) instead of one target."),
    click.option("--limit", "-l", metavar="PATTERN", help="Only the inventory's hosts matching this Ansible pattern."),
    click.option("--forks", type=click.IntRange(min=1), default=5, show_default=True,
                 help="Hosts worked on at once (Ansible's forks)."),
)
#: ``--inventory`` and the waves: every command that changes a fleet's hosts (apply, rollback,
#: sync, undo).
WAVE_OPTIONS = INVENTORY_OPTIONS + (
    click.option("--waves", default="100%", show_default=True, metavar="N,P%,...",
                 help="Batches of hosts, canary first, e.g. 1,25%,100% (Ansible's serial); the last repeats."),
    click.option("--max-fail", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Unreachable hosts tolerated before the rollout stops; a failing host always stops it."),
)


def hook_commands(hidden: bool = False) -> tuple[Callable[..., Any], ...]:
    """``--health-cmd`` and ``--after-cmd``; ``hidden`` where a command takes them only to
    refuse them with why (``undo``: an undo has no undo)."""
    return (click.option("--health-cmd", metavar="CMD", hidden=hidden,
                         help="Shell command run on each host after its change; failing rolls that "
                              "host back and stops."),
            click.option("--after-cmd", metavar="CMD", hidden=hidden,
                         help="Shell command run on each host after its change (and after an "
                              "undo), e.g. a restart."))


#: The rollout options of `apply`, `rollback` and `sync` with ``--inventory``.
ROLLOUT_OPTIONS = WAVE_OPTIONS + hook_commands()
_ROLLOUT_ONLY = ("waves", "max_fail", "health_cmd", "after_cmd")


def fleet_options(where: dict[str, Any], rollout_options: bool = True) -> dict[str, Any]:
    """Take the fleet options out of ``where`` (what is left names one target)."""
    keys = ("inventory", "limit", "forks") + (_ROLLOUT_ONLY if rollout_options else ())
    return {k: where.pop(k) for k in keys}


def wants_fleet(fleet: dict[str, Any], where: dict[str, Any]) -> bool:
    """Whether the command runs on a fleet; refuses a target and an inventory together (and
    one target's --python and ssh options, which a host takes from the inventory), and the
    rollout options without an inventory."""
    if fleet.get("inventory") is None:
        given = [f"--{k.replace('_', '-')}" for k in _ROLLOUT_ONLY + ("limit",)
                 if fleet.get(k) not in (None, "100%", 0)]
        if given:
            raise UsageError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for a fleet "
                             "only: add --inventory INVENTORY", option=given[0])
        return False
    if where.get("target") or where.get("roots"):
        raise UsageError("--inventory and --target/--root both name where to run: give one (an "
                         "inventory host's roots are its patchkit_target and patchkit_roots)",
                         option="--inventory")
    state = click.get_current_context().find_object(State) or State()
    given_by: tuple[tuple[str, Any, str], ...] = (  # a host's own, as a fleet passes it
            ("--python", where.get("python"), "set its patchkit_python (the python the fixes' "
             "checks run with; ansible_python_interpreter runs the engine)"),
            ("--ssh-option", state.ssh_options, "set its ssh options in "
             "ansible_ssh_common_args (e.g. \"-o ProxyJump=bastion\")"),
            ("--ssh-program", state.ssh_program, "set its ssh client in "
             "ansible_ssh_executable"))
    for option, given, instead in given_by:
        if given:
            raise UsageError(f"{option} is for one target; with --inventory, each host is "
                             f"reached and checked as the inventory says: {instead} there, and "
                             f"drop {option}", option=option)
    return True


def rollout(state: State, op: str, names: list[str], fleet: dict[str, Any], *, dry_run: bool,
            as_json: bool, **options: Any) -> int:
    from .. import fleet as fleets

    opts = fleets.FleetOptions(waves=fleets.parse_waves(fleet["waves"]), max_fail=fleet["max_fail"],
                               forks=fleet["forks"], health_cmd=fleet["health_cmd"],
                               after_cmd=fleet["after_cmd"], dry_run=dry_run,
                               health_limit=fleet.get("health_limit"))
    report = fleets.rollout(state.catalog(), op, names, inventory=fleet["inventory"],
                            limit=fleet["limit"], options=opts, progress=_progress(as_json), **options)
    data = dict(report.to_json(), op=state.op or op)  # the command run: a sync's engine op is apply
    restarts: tuple[str, ...] = ()
    on: list[str] = []
    defined = True
    if not fleet["after_cmd"]:  # else the after-command was the restart, run on each host
        restarts, on, defined = _restarts(state, report)
        data.update(restart=list(restarts), restart_hosts=on)

    def draw(out: Any) -> None:
        from .render_status import render_after

        render_rollout(out, report)
        render_after(out, None, restarts, op, defined, hosts=on)

    render.emit(as_json, data, draw)
    _note_options(state, fleet, report.hosts)
    return report.exit_code


def _note_options(state: State, fleet: dict[str, Any], hosts: Any) -> None:
    """A host's message that suggests a patchkit command (a drift's ``patchkit rollback --force
    FIX``) means it on that host: a ``note:`` line on stderr gives the options that reach it,
    as one target's error does (docs/cli.md, Piped output)."""
    needing = [h.host for h in hosts if h.detail and suggests(h.detail, "--inventory")]
    if needing:
        import shlex

        given = [*(["--catalog", state.catalog_dir] if state.catalog_dir else []),
                 "--inventory", str(fleet["inventory"]), "--limit", ",".join(needing)]
        sys.stderr.write(f"note: run the patchkit commands above with this run's options: "
                         f"{shlex.join(given)}\n")


def _restarts(state: State, report: Any) -> tuple[tuple[str, ...], list[str], bool]:
    """The restarts named by the catalog's fixes the rollout changed on some host, the hosts
    it changed them on, and whether patchkit.toml defines every one of them: those hosts run
    the old code until restarted. A host whose change was undone after a failed hook runs the
    code its files hold: none."""
    from ..hooks import changed
    from .ops import restarts_said

    catalog = state.catalog()
    held, on = set(catalog.names()), []
    fixes: dict[str, Any] = {}
    for host in (h for h in report.hosts if not h.undone):
        result = host.result or {}
        op = result.get("op") or report.op
        done = [f["name"] for f in result.get("fixes") or ()
                if changed(op, f.get("outcome"), f.get("files")) and f["name"] in held]
        named = [n for n in done if catalog.get(n).restart]
        if named:
            on.append(host.host)
            fixes.update((n, catalog.get(n)) for n in named)
    restarts, defined = restarts_said(state, list(fixes.values()))
    return restarts, on, defined


def survey(state: State, op: str, names: list[str], fleet: dict[str, Any], *, as_json: bool,
           lock_timeout: float, exit_code: bool = False, running_gate: bool = False,
           show_all: bool = False) -> int:
    from .. import fleet as fleets

    _progress(as_json)(f"{op} on the hosts of {fleet['inventory']}")
    result = fleets.survey(state.catalog(), op, names, inventory=fleet["inventory"],
                           limit=fleet["limit"], forks=fleet["forks"], lock_timeout=lock_timeout)
    if op == "status":
        from ..fleet.status import by_release, converged, running_cells, status_cells

        readable = state.catalog().readable()[0]
        inactive = () if show_all else {f.name for f in readable if f.is_inactive}
        cells = status_cells(result, names or [f.name for f in readable], inactive)
        running = running_cells(result)
        render.emit(as_json, dict(result.to_json(), matrix=cells, running=running,
                                  by_release=by_release(cells)),
                    lambda out: render_matrix(out, cells, running))
        if not as_json:
            _recovered(result.hosts)
        render.broken_note(result.broken, as_json)
        if result.error is not None:  # no host answered: no matrix to read
            sys.stderr.write(f"error: {result.error.message}\n")
            return result.error.exit_code
        unconverged = not converged(result, cells, running, running_gate) or bool(result.broken)
        return EXIT_CHECK_FAILED if exit_code and unconverged else 0
    render.emit(as_json, result.to_json(), lambda out: render_hosts(out, result.hosts, op))
    _note_options(state, fleet, result.hosts)
    return 0 if result.error is None else result.error.exit_code


def _recovered(hosts: Any) -> None:
    """Runs a killed controller (or host) left, finished or undone by this one: on stderr."""
    for host in hosts:
        for rec in (host.result or {}).get("recovered") or ():
            sys.stderr.write(f"{host.host}: recovered an interrupted {rec.get('op')} of "
                             f"{', '.join(rec.get('fixes') or ())}: {rec.get('outcome')}\n")


def _cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "-"
    return f"{cell['state']} v{cell['version']}" if cell.get("version") else cell["state"]


def render_matrix(console: Any, cells: dict[str, dict[str, dict[str, Any]]],
                  running: dict[str, str] | None = None) -> None:
    """Terminal: a host x fix table (and a ``running`` column). Plain: one line per host and fix
    (host, fix, state, version), then per host ``HOST (running) WHAT``."""
    from ..fleet.status import NOT_LOOKED_AT, by_release, cell_fixes

    fixes = cell_fixes(cells)
    running = running or {}
    if isinstance(console, render.PlainConsole):
        for host, row in cells.items():
            for fix in fixes:
                cell = row.get(fix) or {"state": "-"}
                version = f"v{cell['version']}" if cell.get("version") else ""
                reason = f"\t{render.one_line(cell['detail'])}" if cell.get("detail") else ""
                console.file.write(f"{host}\t{fix}\t{cell['state']}\t{version}{reason}\n")
            if running:  # one line per host ("-": not reached), as docs/cli.md says
                console.file.write(f"{host}\t(running)\t{running.get(host, '-')}\t\n")
        return
    rows = [[host, *(_cell(row.get(fix)) for fix in fixes), *([running.get(host, "-")] if running else [])]
            for host, row in cells.items()]
    style = dict(render.STATE_STYLE, unreachable="bold red", failed="bold red")
    groups = "; ".join(f"{r}: {', '.join(h)}" for r, h in by_release(cells).items())
    title = "fleet status" + (f" (sglang {groups})" if groups else "")
    heads = ["host", *fixes, *(["running"] if running else [])]
    wide = sum(max(len(h), *(len(r[i]) for r in rows)) + 2 for i, h in enumerate(heads)) if rows else 0
    if wide > console.width:  # too many fixes for a column each: a row per host and fix
        long = [[host, fix, _cell(row.get(fix))] for host, row in cells.items() for fix in fixes]
        long += [[host, "(running)", running.get(host, "-")] for host in cells] if running else []
        render.write_table(console, long, ("host", "bold"), ("fix", ""),
                           ("state", dict(style, restart="bold yellow", current="green")),
                           title=title)
    else:
        render.write_table(console, rows, ("host", "bold"), *((fix, style) for fix in fixes),
                           *([("running", {"restart": "bold yellow", "current": "green"})]
                             if running else []), title=title)
    for host, row in cells.items():  # why a host has no status: once per host, under the table
        failed = dict.fromkeys((c["state"], c["detail"]) for c in row.values()
                               if c.get("detail") and c["state"] != NOT_LOOKED_AT)
        for state, detail in failed:  # the same in every cell: said once
            render.line(console, [(f"{host}: ", "bold"), (f"{state}: ", "bold red"), (detail, "")],
                        soft_wrap=True)
        for fix, c in row.items():  # a fix recorded on a root the host was not given
            if c["state"] == NOT_LOOKED_AT:
                render.line(console, [(f"{host}: {fix}: ", "bold"), (f"{c['state']}: ", "yellow"),
                                      (c["detail"], "")], soft_wrap=True)


HOST_STYLE = {"applied": "bold green", "rolled-back": "bold yellow", "undone": "bold yellow",
              "unchanged": "green", "untouched": "dim", "unreachable": "bold red",
              "refused": "bold red", "failed": "bold red", "unknown": "bold red", "would-apply": "cyan",
              "would-roll-back": "yellow", "would-undo": "yellow", "ok": "green"}


def render_hosts(console: Any, hosts: Any, op: str) -> None:
    rows = [[h.host, h.state, "" if h.wave is None else str(h.wave), h.detail] for h in hosts]
    render.write_table(console, rows, ("host", "bold"), ("state", HOST_STYLE), ("wave", "right"),
                       ("detail", ""), title=f"fleet {op}")


def render_rollout(console: Any, report: Any) -> None:
    """Per host: its state, wave and why; then the groups and why the rollout stopped."""
    render_hosts(console, report.hosts, report.op + (" (dry run)" if report.dry_run else ""))
    notes = [f"{len(hosts)} host(s) {'would get' if report.dry_run else 'to change'}: {label}"
             for label, hosts in report.groups]
    if report.dry_run:  # each distinct diff once, with the hosts it would be written on
        notes += [f"--- {', '.join(hosts)}: {fix} {where}\n{diff}"
                  for (fix, where, diff), hosts in report.diffs().items()]
    if report.stopped:
        notes.append(f"stopped: {report.stopped}")
    for note in notes:
        render.line(console, [(note, "bold red" if note.startswith("stopped") else "")])


def fleet_lineage(state: State, fix: str | None, fleet: dict[str, Any], *, as_json: bool,
                  lock_timeout: float) -> int:
    """`log --inventory`: per fix, each version and the hosts that run it."""
    from .. import fleet as fleets

    from ..fleet.status import lineage

    catalog = state.catalog()
    _progress(as_json)(f"log on the hosts of {fleet['inventory']}")
    result = fleets.survey(catalog, "status", [], inventory=fleet["inventory"], limit=fleet["limit"],
                           forks=fleet["forks"], lock_timeout=lock_timeout)
    data = lineage(catalog, result, fix)
    fixes, unreachable, failed = data["fixes"], data["unreachable"], data["failed"]

    def draw(out: Any) -> None:
        for entry in fixes:
            render.line(out, [(entry["name"], "bold"), (f"  (catalog v{entry['catalog_version']})", "dim")])
            for key, hosts in sorted(entry["hosts"].items(), key=lambda kv: kv[0] == "not-applied"):
                render.line(out, [(f"  {key}\t", "green" if key.startswith("v") else "dim"),
                                  (" ".join(hosts), "")])
        if unreachable:
            render.line(out, [("unreachable: ", "bold red"), (" ".join(unreachable), "")])
        for host, detail in failed.items():
            render.line(out, [("failed: ", "bold red"), (f"{host}: {render.one_line(detail)}", "")])

    error = result.error  # no host answered: no host's version to show
    render.emit(as_json, dict(data, **({"ok": False, "error": error.to_dict()} if error else {})), draw)
    if error is not None:
        sys.stderr.write(f"error: {error.message}\n")
    return 0 if error is None else error.exit_code


def _progress(quiet: bool) -> Any:
    def say(message: str) -> None:
        if not quiet:
            sys.stderr.write(f"{message}\n")
            sys.stderr.flush()

    return say


@command(
    "plan", click.argument("fixes", nargs=-1),
    click.option("--op", type=click.Choice(OPS), default="apply",
                 show_default=True, help="The operation the request is for."),
    click.option("--with-deps", is_flag=True, help="Also include the fixes these depend on (apply)."),
    *write_options("host", " (apply)"),
    click.option("--collections-path", is_flag=True,
                 help="Print the directory to put on ANSIBLE_COLLECTIONS_PATH, and nothing else."),
)
def plan(state: State, fixes: tuple[str, ...], op: str, with_deps: bool, commit: bool,
         no_git: bool, collections_path: bool, as_json: bool) -> int:
    """Render the engine request for the collection's patchkit.fleet.engine task.

    Write it to a file with --json and give patchkit.fleet.engine that file (plan: FILE) in your own
    playbook; each host's roots come from its patchkit_target and patchkit_roots."""
    from ..fleet import COLLECTIONS_PATH, plan as render_plan

    if collections_path:
        return render.emit(as_json, {"collections_path": str(COLLECTIONS_PATH)},
                           lambda out: click.echo(str(COLLECTIONS_PATH)))
    if not fixes and op not in ("status", "undo"):  # an undo names none: the host's last change
        raise UsageError(f"name at least one fix to {op}; `patchkit list` shows them")
    if commit and op != "apply":
        raise UsageError("--commit records applied fixes; it goes with --op apply", option="--commit")
    request = render_plan(state.catalog(), op, list(fixes), with_deps=with_deps, commit=commit,
                          git=not no_git)
    doc: dict[str, Any] = {"plan": 1, "op": op, "fixes": [f["name"] for f in request["fixes"]],
           "collections_path": str(COLLECTIONS_PATH), "request": request}

    def draw(out: Any) -> None:
        what = (f"{', '.join(doc['fixes'])}: {len(request['fixes'])} fix(es), "
                f"{sum(len(f.get('files') or ()) for f in request['fixes'])} file record(s)"
                if op != "undo" else "each host's last apply, sync or rollback")
        render.line(out, [(f"{op} of {what}", "")])
        render.line(out, [("write it with --json > plan.json and run it with "
                           "patchkit.fleet.engine (plan: plan.json); docs/fleet.md", "dim")])

    return render.emit(as_json, doc, draw)


COMMANDS = [plan]
