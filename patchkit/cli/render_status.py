"""Drawing a target's status (``patchkit status``): one row per fix, what runs old code from
the target, and what was run after a change; rich on a terminal, plain lines in a pipe."""

from __future__ import annotations

import os
import sys
from typing import Any, List, Sequence

from ..engine.contract import RECORDED
from ..results import OpResult
from .render import (
    STATE_STYLE,
    STATUS_FILES,
    PlainConsole,
    one_line,
    recovered_notes,
    unseen_notes,
    note_line,
    broken_detail,
    in_place,
    file_state,
    file_where,
    line,
    write_table,
)


def _status_rows(result: OpResult, verbose: bool) -> List[List[str]]:
    rows = []
    for s in result.status:
        if s.state == "not-applied" and not verbose:
            continue
        bad = [f"{file_where(f).partition(':')[2]} ({file_state(f)})" for f in s.files
               if f.get("state") != "ok" and s.state != "outdated"]  # outdated: the detail says
        if len(bad) > STATUS_FILES:  # a drifted release series: thousands of files
            bad = bad[:STATUS_FILES] + [f"and {len(bad) - STATUS_FILES} more (--json lists them)"]
        state = s.state
        if state == "outdated":
            state = f"outdated (v{s.version} applied, v{s.catalog_version} in the catalog)"
            if result.release in s.releases:  # the variant of the release the target runs
                state += f": v{s.catalog_version} is {result.release}'s variant"
            if s.detail:  # the files hold the catalog's version already
                state += f"; {s.detail}"
        elif s.detail and s.detail.startswith("in upstream since"):
            state = f"{state}: {s.detail}"
        elif state in ("lost", "drifted", "applied", "not-applied") and s.detail:
            state = f"{state}: {s.detail}"  # reinstalled, a root elsewhere, a manifest gone, ...
        shown = s.version is not None and s.state in RECORDED
        rows.append([s.name, state, f"v{s.version}" if shown else "", s.applied_at or "",
                     ", ".join(bad)])
    return rows


def render_status(console: Any, result: OpResult, *, verbose: bool = False,
                  unread: bool = True) -> None:
    """Plain: one line per fix (fix, state, version, applied at, files), notes on stderr;
    ``unread``: name the processes ``/proc`` hid (:func:`running_lines`)."""
    rows = _status_rows(result, verbose)
    notes = recovered_notes(result)
    if not rows:
        notes.append([(f"no fix applied or present on {result.target}", "")])
    notes += unseen_notes(result)  # applied there, not looked at: always said
    if verbose:  # --all: the other fixes it could not look at, and why
        unseen = {name for name, _roots in result.unseen}
        notes += [[(f"{name}: ", "bold"), (f"root {', '.join(roots)} not given", "yellow"),
                   (f" (--root {roots[0]}=PATH)", "dim")]
                  for name, roots in result.left_out if name not in unseen]
    for note in notes:
        note_line(console, note)
    shown = {row[0]: row for row in rows}
    errors = []  # one row a fix, in its place by name: a recorded one keeps its version and time
    for b in result.broken:
        row = shown.get(b.name)
        if row is not None:  # the target records it: its row came after the catalog's
            rows.remove(row)
        errors.append([b.name, "error", *(row[2:4] if row else ("", "")), broken_detail(b)])
    rows = in_place(rows, errors)
    if rows and not isinstance(console, PlainConsole):
        # a terminal: the state alone in its column, why (lost: ..., applied: ...) with the
        # files in the last one, which folds; piped, one field as docs/cli.md gives it
        rows = [[name, state.partition(": ")[0], version, at,
                 "; ".join(x for x in (state.partition(": ")[2], files) if x)]
                for name, state, version, at, files in rows]
    if rows:
        write_table(console, rows, ("fix", "bold"), ("state", dict(STATE_STYLE, error="bold red")),
                    ("version", "right"),
                    ("applied at", "dim"), ("detail", ""), title=f"status of {result.target}"
                    + (f" (sglang {result.release})" if result.release else ""))
    render_running(console, result, unread)


def render_after(console: Any, after: Any, restarts: tuple[str, ...] = (), op: str = "apply",
                 defined: bool = True, hosts: Sequence[str] = ()) -> None:
    """The restarts the changed fixes need, and each command run after the change (``op``:
    the command that changed them, which ``--restart`` would have run them with; not
    ``defined``: patchkit.toml does not define them, so --restart cannot; ``hosts``: a
    fleet's hosts that need them)."""
    if restarts and (after is None or not any(r.what == "after-cmd" for r in after.ran)):
        it = "it on each host" if hosts else "it"
        how = (f"patchkit.toml [restarts]; run {it}" if defined and op == "undo" else
               f"patchkit.toml [restarts]; run {it}, or {op} with --restart" if defined else
               f"run {it} yourself" if op == "undo" else
               f"run {it} yourself; define it in patchkit.toml [restarts] for --restart to run it")
        where = f" on {', '.join(hosts)}:" if hosts else ""
        line(console, [("restart needed", "bold yellow"),
                       (f"{where} {', '.join(restarts)} ({how})", "")])
    for run in (after.ran if after is not None else ()):
        mark = ("✓", "green") if run.ok else ("✗", "red")
        line(console, [mark, (f" {run.what}: {run.command} (exit {run.returncode})", "")])


def running_lines(result: OpResult, unread: bool = True) -> List[List[str]]:
    """Plain rows of what runs old code: ``restart pending``, a stale ``.pyc``, what was not
    looked at (docs/cli.md, Piped output); ``unread``: the processes ``/proc`` hid too (a
    container's PID 1 is hidden from every status: said when asked, ``--running`` or ``--all``)."""
    run = result.running
    if run is None:
        return []
    if not run.available:
        return [["processes not looked at", run.detail or "/proc cannot be read"]]
    rows = [["restart pending", str(p.pid), p.started_at or "", ",".join(p.roots), p.command,
             _changed(p)] for p in run.pending]
    rows += [["stale .pyc", str(s.get("pyc")), str(s.get("source")), str(s.get("why"))]
             for s in run.stale_pyc]
    if run.unreadable and unread:
        pids = [str(u.get("pid")) for u in run.unreadable]
        named = ", ".join(pids[:SHOWN_PIDS]) + (
            f" and {len(pids) - SHOWN_PIDS} more" if len(pids) > SHOWN_PIDS else "")
        rows.append(["processes not read", f"{len(pids)} process(es) (pid {named}) whose /proc "
                     "entries this user cannot read were not looked at" + (
                         " (run as their user or root)" if os.geteuid() != 0 else
                         " (hidden even from root: another PID namespace's or the kernel's)")])
    return rows


SHOWN_PIDS = 5  # the processes not read named on the line (--json lists them all)


def _changed(p: Any) -> str:
    more = p.changed_count - len(p.changed)
    return ", ".join(p.changed) + (f" and {more} more" if more > 0 else "")


def render_running(console: Any, result: OpResult, unread: bool = True) -> None:
    """Plain: tab-separated lines on stderr (stdout keeps one line per fix); a terminal: a table
    of every process using the target, then the notes (``unread``: :func:`running_lines`)."""
    rows = running_lines(result, unread)
    if isinstance(console, PlainConsole):
        PlainConsole(sys.stderr).file.write("".join("\t".join(map(one_line, r)) + "\n" for r in rows))
        return
    run = result.running
    if run is not None and run.processes:
        write_table(console, [[str(p.pid), p.state.replace("-", " "), p.started_at or "", p.command,
                               p.via] for p in run.processes],
                    ("pid", "right"), ("state", {"restart": "bold yellow", "current": "green"}),
                    ("started", "dim"), ("command", ""), ("uses", "dim"),
                    title=f"running from {result.target}")
    for row in rows:
        if row[0] != "restart pending":
            line(console, [(row[0], "yellow"), (" " + " ".join(row[1:]), "")])
