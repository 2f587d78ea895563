"""Human-readable output: rich on a terminal, plain text elsewhere (docs/cli.md, Piped output).
Nothing is computed here."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, List, Mapping, Tuple

from ..engine import contract as wire
from ..errors import PatchkitError
from ..results import CheckResult, FileOutcome, FixOutcome, OpResult, file_where

if TYPE_CHECKING:
    from rich.console import Console

#: A fix touching more files than this is summarized unless verbose.
FEW_FILES = 20
#: Files not ok listed per fix by ``status``; the rest are counted.
STATUS_FILES = 5
#: Diffs longer than this (characters, in all) are written plainly even on a terminal.
COLOR_DIFF_LIMIT = 200_000

OUTCOME_STYLE = {
    wire.APPLIED: "bold green", wire.ALREADY_APPLIED: "green", wire.WOULD_APPLY: "cyan",
    wire.UPGRADED: "bold green", wire.WOULD_UPGRADE: "cyan", wire.ROLLED_BACK: "bold yellow",
    wire.WOULD_ROLL_BACK: "yellow", wire.VERIFIED: "bold green", wire.FAILED: "bold red",
    wire.NOT_APPLIED: "dim", wire.NOT_NEEDED: "dim", wire.PRESENT_UNRECORDED: "yellow",
    wire.UNDONE: "bold yellow", wire.WOULD_UNDO: "yellow",
}
STATE_STYLE = {
    wire.APPLIED: "green", wire.DRIFTED: "bold red", wire.NOT_APPLIED: "dim", wire.PARTLY_PRESENT: "yellow",
    wire.PRESENT_UNRECORDED: "cyan", wire.OUTDATED: "yellow", wire.NOT_NEEDED: "dim", wire.LOST: "bold yellow",
}

#: A line of output as (text, rich style) segments.
Segments = List[Tuple[str, str]]


def plain_output(stream: Any = None) -> bool:
    """Whether output to ``stream`` (stdout) is plain text: not a terminal, unless FORCE_COLOR."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not (isatty is not None and isatty()) and not os.environ.get("FORCE_COLOR")


def one_line(cell: str) -> str:
    """A cell of a plain line: a newline or tab in it (a host's error output) becomes a space, so
    each row stays one line of tab-separated fields."""
    return " ".join(cell.split()) if any(c in cell for c in "\n\r\t") else cell


class PlainConsole:
    """What the renderers use of rich's Console, writing plain text that is never folded."""

    is_terminal = False

    def __init__(self, file: Any = None) -> None:
        self.file = sys.stdout if file is None else file

    def print(self, *objects: Any, **_options: Any) -> None:
        """Text as it is; a table (rebase's) drawn by rich without color, never folded."""
        plain = [o if isinstance(o, str) else getattr(o, "plain", None) for o in objects]
        if None not in plain:
            self.file.write(" ".join(plain) + "\n")  # type: ignore[arg-type]
            return
        from rich.console import Console

        Console(file=self.file, width=1 << 16, color_system=None, highlight=False,
                soft_wrap=False).print(*objects)


def stdout() -> Any:
    """The console for a command's output: rich on a terminal, :class:`PlainConsole` else."""
    if plain_output():
        return PlainConsole()
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def stderr() -> Console:
    """rich's console on stderr, for spinners and progress (it draws none off a terminal)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=False)


#: Seconds a step runs before its plain progress line is written (off a terminal).
PROGRESS_AFTER = 1.0


class PlainProgress:
    """Progress off a terminal (a pipe, a CI log): a step still running after
    ``PATCHKIT_PROGRESS_AFTER`` seconds (default 1; ``off``: never) is written as one plain line
    on stderr, ``patchkit: STEP``; quick steps write nothing. ``update`` starts the next step, as
    rich's status does."""

    def __init__(self, message: str) -> None:
        setting = os.environ.get("PATCHKIT_PROGRESS_AFTER", "")
        try:
            self.after: float | None = None if setting == "off" else float(setting or PROGRESS_AFTER)
        except ValueError:
            self.after = PROGRESS_AFTER
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self.update(message)

    def _say(self, message: str) -> None:
        with self._lock:
            sys.stderr.write(f"patchkit: {one_line(message)}\n")
            sys.stderr.flush()

    def update(self, message: str) -> None:
        self.stop()
        if message and self.after is not None:
            if self.after <= 0:
                self._say(message)
                return
            self._timer = threading.Timer(self.after, self._say, (message,))
            self._timer.daemon = True
            self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.stop()


def busy(message: str, *, quiet: bool = False) -> ContextManager[Any]:
    """While a long call runs: a spinner on stderr on a terminal, plain progress lines off one
    (:class:`PlainProgress`); nothing when ``quiet``. Its ``update(step)`` names the next step."""
    if quiet:
        return contextlib.nullcontext(_Quiet())
    if not sys.stderr.isatty():
        return PlainProgress(message)
    return stderr().status(message)


class _Quiet:
    def update(self, _message: str) -> None:
        pass


def print_json(data: Any) -> None:
    """One JSON document on stdout. An object says whether the command ran (docs/cli.md,
    ``--json``): one that does not say is a success's, ``"ok": true``; a failure's says
    ``"ok": false`` with its ``error``; and which command it is, ``op``, where it does not say."""
    if isinstance(data, dict) and "ok" not in data:
        data = {"ok": True, **data}
    if isinstance(data, dict) and "op" not in data:  # every object names its command
        import click

        from .common import State

        ctx = click.get_current_context(silent=True)
        state = ctx.find_object(State) if ctx is not None else None
        data = {"op": state.op if state is not None else None, **data}
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def emit(as_json: bool, data: Any, draw: Callable[[Any], Any]) -> int:
    """A command's output: ``data`` as JSON, or ``draw`` on the stdout console. Exit code 0."""
    if as_json:
        print_json(data)
    else:
        draw(stdout())
    return 0


def file_state(f: Mapping[str, Any]) -> str:
    """A result file's state as status and apply say it: ``drifted``, or, its bytes as written
    and only its mode changed, ``drifted: mode 0755, recorded 0644``."""
    if f.get("recorded_mode"):
        return f"{f.get('state')}: mode {f.get('mode')}, recorded {f['recorded_mode']}"
    return str(f.get("state"))


def line(console: Any, segments: Segments, soft_wrap: bool = False) -> None:
    """One line of segments to a rich Console (styled) or a PlainConsole."""
    if isinstance(console, PlainConsole):
        console.file.write("".join(text for text, _style in segments) + "\n")
        return
    from rich.text import Text

    console.print(Text.assemble(*segments), soft_wrap=soft_wrap)


def _check_line(c: CheckResult) -> Segments:
    mark = ("✓ ", "green") if c.ok else ("✗ ", "bold red")
    label = c.name or c.kind
    out: Segments = [mark, (label, "" if c.ok else "bold")]
    if c.detail:
        out.append((f": {c.detail}", "dim" if c.ok else ""))
    if not c.ok and c.where and c.where not in label:
        out.append((f" ({c.where})", "dim"))
    return out


def _hunk_summary(f: FileOutcome) -> str:
    places = ", ".join(f"{h.line}" + (f" (offset {h.offset:+d})" if h.offset else "") for h in f.hunks)
    return f"{len(f.hunks)} hunk{'' if len(f.hunks) == 1 else 's'} at line {places}"


def diff_stat(diff: str) -> tuple[int, int]:
    """Lines added and removed by a unified diff (its ---/+++ headers not counted)."""
    bodies = [s[s.find("\n@@"):] for s in ("\n" + diff).split("\ndiff --git ") if "\n@@" in s]
    return sum(b.count("\n+") for b in bodies), sum(b.count("\n-") for b in bodies)


def _files_summary(files: tuple[FileOutcome, ...]) -> str:
    ops = [f.op for f in files]
    stats = [diff_stat(f.diff) for f in files]
    added, removed = sum(a for a, _ in stats), sum(r for _, r in stats)
    kinds = ", ".join(f"{ops.count(op)} {label}" for op, label in (
        ("modify", "modified"), ("create", "created"), ("delete", "deleted")) if op in ops)
    noun = "file" if len(files) == 1 else "files"
    if not any(f.diff for f in files):  # an undo's files: their bytes put back, no diff drawn
        return f"{len(files)} {noun} changed ({kinds})"
    return f"{len(files)} {noun} changed ({kinds}), +{added} -{removed} lines"


def write_diff(console: Any, diff: str, *, color: bool) -> None:
    """A diff, highlighted with ``color`` on a terminal, else as the plain text it is."""
    if color and console.is_terminal:
        from rich.syntax import Syntax

        console.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default",
                             word_wrap=True))
        return
    console.file.write(diff if diff.endswith("\n") or not diff else diff + "\n")
    console.file.flush()


def render_fix_outcome(console: Any, fix: FixOutcome, *, show_diff: bool,
                       all_checks: bool = False, verbose: bool = False,
                       color_diff: bool = True) -> None:
    """One fix of a result; ``console`` is a rich Console or a :class:`PlainConsole`."""
    style = OUTCOME_STYLE.get(fix.outcome, "")
    version = f" v{fix.version}" if fix.version is not None else ""
    if fix.from_version is not None:
        version = f" v{fix.from_version} -> " + (f"v{fix.version}" if fix.version is not None
                                                   else "not applied")
    line(console, [(f"{fix.outcome} ", style), (f"{fix.name}{version}", "bold")])
    if fix.drifted and fix.outcome == "already-applied":
        _drifted(console, fix)
    if fix.outcome == "not-applied" and not fix.detail:  # a rollback of a fix not recorded
        line(console, [("  nothing to do: the target has no record of it", "dim")])
    if fix.detail and fix.outcome in ("not-needed", "present-unrecorded", "upgraded", "verified",
                                      "already-applied",
                                      "not-applied", "applied", "would-apply",
                                      "would-upgrade", "rolled-back", "would-roll-back",
                                      "undone", "would-undo") \
            and not (fix.outcome == "already-applied" and fix.drifted):  # drift: said above
        # a renamed fix's record taken over; an upgrade: the files held it already; an apply: put back on the fixes upgraded
        # under it; a rollback: of a lost fix, only forgotten; a verify: of a fix whose
        # manifest is gone, only what its record holds
        line(console, [(f"  {fix.detail}", "dim")])
    if fix.lost:  # the reinstall is the news, not the apply: say why it was applied again
        line(console, [("  re-applied: was lost: ", "yellow"), (fix.lost, "")])
    _commits(console, fix)
    op_mark = {"modify": "M", "create": "A", "delete": "D"}
    rows = verbose or len(fix.files) <= FEW_FILES
    if fix.files and not rows:
        line(console, [("  ", ""), (_files_summary(fix.files), ""), ("  (-v lists them)", "dim")])
    for f in fix.files:
        if rows:
            row: Segments = [(f"  {op_mark.get(f.op, f.op)} ", ""), (f.where or f"{f.root}:{f.path}", "bold")]
            if not all_checks and f.hunks:
                row.append((f"  {_hunk_summary(f)}", "dim"))
            line(console, row)
            if all_checks:
                for h in f.hunks:
                    where = f"line {h.line}"
                    if h.offset:
                        where += f" (offset {h.offset:+d} from {h.expected_line})"
                    line(console, [(f"      hunk #{h.index} of {h.patch} at {where}", "dim")])
        if show_diff and f.diff:
            write_diff(console, f.diff, color=color_diff)
    pre = fix.preconditions
    failed = [c for c in pre if not c.ok]
    # A dry run lists every check, unless there are many (one per file of a large series).
    listed = pre if all_checks and (verbose or len(pre) <= FEW_FILES) else failed
    if listed:
        line(console, [("  preconditions:", "")])
        for c in listed:
            line(console, [("    ", "")] + _check_line(c))
    if not failed and len(listed) < len(pre):
        line(console, [("  ", ""), ("✓ ", "green"), (f"{len(pre)} precondition{'' if len(pre) == 1 else 's'} passed", "")])
    if fix.verification:
        line(console, [("  verification:", "")])
        for c in fix.verification:
            line(console, [("    ", "")] + _check_line(c))


def _commits(console: Any, fix: FixOutcome) -> None:
    """The commits the run made for the fix, whole ids (to copy into git), and what it reverted."""
    reverted = (fix.reverts or {}).get("commit")
    if reverted and fix.outcome in ("rolled-back", "would-roll-back"):
        line(console, [("  reverts commit ", ""), (str(reverted), "bold")])
    for c in fix.commits:
        line(console, [("  commit ", ""), (str(c.get("sha")), "bold"), (f" (root {c.get('root')})", "")])


def _drifted(console: Any, fix: FixOutcome) -> None:
    """An applied fix whose files changed since patchkit wrote them: which, and what to do."""
    for f in fix.drifted[:STATUS_FILES]:
        line(console, [("  drifted: ", STATE_STYLE["drifted"]),
                        (file_where(f), "bold"),
                        (" (deleted since patchkit wrote it)" if f.get("state") == "missing"
                         else f" ({file_state(f)})" if f.get("recorded_mode")
                         else " (changed since patchkit wrote it)", "")])
    if len(fix.drifted) > STATUS_FILES:
        line(console, [(f"  and {len(fix.drifted) - STATUS_FILES} more (--json lists them)", "")])
    line(console, [(f"  the fix is recorded but its files no longer hold what it wrote; "
                     f"patchkit verify {fix.name} fails until they do; {fix.detail}", "yellow")])


def recovered_notes(result: OpResult) -> List[Segments]:
    """A line per interrupted run this one found and recovered first (an undo put back is
    the change it was undoing, standing: said so, with how to finish it)."""
    return [[("recovered", "yellow"), (f" an interrupted {rec.get('op')} of "
             f"{', '.join(rec.get('fixes') or [])}: {rec.get('outcome')}"
             + ("; the change it was undoing stands (patchkit undo runs it again)"
                if rec.get("op") == "undo" and rec.get("outcome") == "rolled-back" else ""), "")]
            for rec in result.recovered]


def unseen_notes(result: OpResult, command: str | None = None) -> List[Segments]:
    """A line per fix the target records as applied on a root this run was not given: status
    did not look at it, verify did not verify it, sync did not sync it (stderr; ``--json``:
    ``unseen``)."""
    what = {"verify": "not verified", "sync": "not synced"}.get(command or result.op,
                                                                "not looked at")
    return [[(f"{name}: ", "bold"), (f"applied here, {what}: root {', '.join(roots)} not given",
                                       "yellow"), (f" (--root {roots[0]}=PATH)", "dim")]
            for name, roots in result.unseen]


def note_line(console: Any, note: Segments) -> None:
    """A note beside a command's output: on stderr when the output is plain text."""
    line(PlainConsole(sys.stderr) if isinstance(console, PlainConsole) else console, note)


def render_result(console: Any, result: OpResult, *, show_diff: bool | None = None,
                  verbose: bool = False, command: str | None = None) -> None:
    """``show_diff`` None: a dry run changing few files shows it; ``command``: the command's
    name where it is not the engine op it ran (``sync`` runs an apply)."""
    if show_diff is None:
        show_diff = result.dry_run and sum(len(fix.files) for fix in result.fixes) <= FEW_FILES
    size = sum(len(f.diff) for fix in result.fixes for f in fix.files) if show_diff else 0
    for note in recovered_notes(result):
        line(console, note)
    for note in unseen_notes(result, command):
        note_line(console, note)
    seen = {name for name, _roots in result.unseen}
    for name, roots in result.left_out:  # a sync's fixes on roots not given, never applied
        if name not in seen:
            from ..request_builder import how_to_give

            note_line(console, [(f"{name}: ", "bold"), ("skipped", "dim"), (
                f": never applied here, and root {', '.join(roots)} is not given (to "
                f"{command or result.op} it, give the root: {how_to_give(roots)})", "")])
    head = "dry run of " if result.dry_run else ""
    line(console, [(f"{head}{command or result.op}", "bold"), (f" on {result.target}", "")])
    for fix in result.fixes:
        render_fix_outcome(console, fix, show_diff=show_diff, all_checks=result.dry_run,
                           verbose=verbose, color_diff=size <= COLOR_DIFF_LIMIT)


def render_fix_list(console: Any, fixes: Iterable[Any], broken: Iterable[Any] = ()) -> None:
    """Plain: one line per fix (fix, version, status, the releases it serves, title), by name; a
    fix whose manifest cannot be read: (fix, "", error, "", FILE:LINE: message), in its place."""
    rows = in_place([[f.name, f"v{f.version}", f.status, serves_text(f), f.title] for f in fixes],
                    [[b.name, "", "error", "", broken_detail(b)] for b in broken])
    write_table(console, rows, ("fix", "bold"), ("version", "right"),
                ("status", {"active": "", "error": "bold red"}), ("serves", ""), ("title", ""))


def in_place(rows: List[List[str]], errors: Iterable[List[str]]) -> List[List[str]]:
    """``rows`` (one a fix, by name) with the error row of each fix that cannot be read where
    its name puts it (before the first row named after it): one row a fix, in the catalog's
    order, whether it reads or not (docs/cli.md, Piped output)."""
    out = list(rows)
    for row in errors:
        out.insert(next((i for i, r in enumerate(out) if r[0] > row[0]), len(out)), row)
    return out


def serves_text(fix: Any) -> str:
    """``0.5.23 (v4), 0.5.22 (v3)``: each release a version serves; ``any`` without a release
    precondition."""
    served = fix.serves()
    return ", ".join(f"{r} (v{v})" for r, v in served.items()) if served else "any"


def broken_detail(broken: Any) -> str:
    """``FILE:LINE: what is wrong`` of a manifest that cannot be read (``BrokenFix.detail``)."""
    return str(broken.detail)


def warn(warnings: Iterable[str]) -> None:
    """``warning: ...`` lines on stderr: what is worth fixing but stops nothing."""
    for text in warnings:
        sys.stderr.write(f"warning: {one_line(text)}\n")


def broken_note(broken: Any, as_json: bool) -> None:
    """On stderr, off --json: how many manifests (or patches they name) could not be read
    (the rows say which)."""
    if broken and not as_json:
        what = ("manifest(s)" if all(b.file.endswith(".toml") for b in broken)
                else "fix(es)")
        sys.stderr.write(f"error: {len(broken)} {what} could not be read (their rows say why): "
                         f"{', '.join(b.where for b in broken)}; fix them (docs/manifest.md)\n")


def write_table(console: Any, rows: List[List[str]], *columns: Tuple[str, Any],
                title: str | None = None) -> None:
    """Rows as tab-separated lines off a terminal; a rich table without borders on one. A column
    is (name, how): a style, "right", or a style by the cell's first word (a word not there: dim).
    Every column but the last holds words a reader copies or greps whole (a fix, a state, a
    time): never folded while they fit the terminal. The last, free text (a detail, a title),
    folds to the terminal's width; when the others leave it too little room (:data:`FREE_MIN`),
    each row's text goes on a line of its own under the row, indented, instead of into a column
    a word wide. The first column names the row: never folded."""
    if isinstance(console, PlainConsole):
        console.file.write("".join("\t".join(map(one_line, row)) + "\n" for row in rows))
        return
    from rich.table import Table
    from rich.text import Text

    def cell(text: str, how: Any) -> Text:
        return Text(text, style=how.get(text.split(" ", 1)[0], "dim")) if isinstance(how, dict) \
            else Text(text)

    def shape(how: Any) -> dict[str, Any]:  # a column's own options: "right", or a style
        return {"justify": how} if how == "right" else {"style": how} if isinstance(how, str) else {}

    fixed = columns[:-1]
    widths = [max([len(name), *(len(r[i]) for r in rows)]) for i, (name, _how) in enumerate(fixed)]
    needed = sum(w + 2 for w in widths)
    fits = needed <= console.width
    if not fixed or needed + FREE_MIN <= console.width:
        whole = Table(box=None, title=Text(title) if title else None, title_justify="left")
        for index, (name, how) in enumerate(columns):
            whole.add_column(name, overflow="fold", no_wrap=index < len(fixed), **shape(how))
        for row in rows:
            whole.add_row(*(cell(c, how) for c, (_name, how) in zip(row, columns)))
        console.print(whole)
        return
    from rich.padding import Padding

    # the free text under each row; the other columns aligned as a table where they fit, else
    # each row's words on a line of its own, wrapped between words (a terminal this narrow)
    if title:
        console.print(Text(title))
    heads = [(name, "table.header") for name, _how in fixed]
    shown: List[List[str] | None] = [None, *rows]  # None: the header
    for entry in shown:
        cells = [Text(name, style=style) for name, style in heads] if entry is None else \
            [cell(c, how) for c, (_name, how) in zip(entry, fixed)]
        if fits:
            line = Table(box=None, show_header=False)
            for width, (_name, how) in zip(widths, fixed):
                line.add_column(width=width, no_wrap=True, **shape(how))
            line.add_row(*cells)
            console.print(line)
        else:
            console.print(Text("  ").join(cells))
        free = columns[-1][0] if entry is None else entry[-1] if len(entry) > len(fixed) else ""
        if free:
            console.print(Padding(Text(free, style="table.header") if entry is None
                                  else cell(free, columns[-1][1]), (0, 0, 0, 4)))


#: The least room the free-text column of a table gets on a terminal before it goes under
#: each row instead (:func:`write_table`).
FREE_MIN = 24


def render_fix(console: Any, fix: Any, files: Mapping[str, list[str]]) -> None:
    """A fix as a good commit message: subject, body, then trailers."""
    line(console, [(fix.title, "bold")])
    line(console, [])
    line(console, [(fix.rationale.strip(), "")])
    line(console, [])
    trailers = [
        ("Fix", f"{fix.name} v{fix.version}"),
        ("Status", fix.status),
        *([("Author", fix.author)] if fix.author else []),
        ("Upstream", f"{fix.upstream.project}, based on {fix.upstream.base_release}; forwarding: "
                     f"{fix.upstream.forwarding}"),
        # as export writes them (DEP-3): reference is where it was forwarded
        *((key, value) for key, value in (("Origin", fix.upstream.origin), ("Bug", fix.upstream.bug),
                                          ("Forwarded", fix.upstream.reference),
                                          ("Applied-Upstream", fix.upstream.applied)) if value),
        ("Applies-to", ", ".join(fix.upstream.releases) or "any release (it patches no sglang root)"),
        *([("Restart", ", ".join(fix.restart))] if fix.restart else []),
        *(("Depends-on", dep) for dep in fix.depends_on),
        *(("Supersedes", sup) for sup in fix.supersedes),
        *([("Reverts", fix.reverts)] if fix.reverts else []),
        *([("Git-Revert", fix.revert.describe())] if fix.revert is not None else []),
        *(("Patch", f"{p.file} [{p.root}] {', '.join(files.get(p.file, []))}") for p in fix.patches),
        *(("Variant", f"v{v.version} serves {', '.join(v.releases)}: "
                      f"{', '.join(p.file for p in v.patches)} (patches/{fix.name}/{v.dir}/)")
          for v in fix.variants),
        *(("Precondition", check.describe()) for check in fix.preconditions),
        *(("Verification", check.describe()) for check in fix.verification),
    ]
    if fix.rollback.notes:
        trailers.append(("Rollback", f"{fix.rollback.strategy}: {fix.rollback.notes.strip()}"))
    trailers += list(fix.headers)  # the patch headers an import kept (Reviewed-by, ...)
    for key, value in trailers:  # a value of several lines folded as git folds a trailer
        line(console, [(f"{key}: ", "cyan"), (value.replace("\n", "\n "), "")])


def render_error(console: Any, err: PatchkitError) -> None:
    """``console`` None: stderr, drawn by rich on a terminal and as plain text elsewhere."""
    if console is None:
        console = PlainConsole(sys.stderr) if plain_output(sys.stderr) else stderr()
    # Never folded to the terminal width: the message names files and commands to copy.
    # It already lists every failed check, so those carried by err.result are not repeated.
    line(console, [("error: ", "bold red"), (err.message, "")], soft_wrap=True)
    result = getattr(err, "result", None)
    if result is not None:
        for rec in result.recovered:
            line(console, [("note:", "yellow"), (f" recovered an interrupted {rec.get('op')}", "")])
