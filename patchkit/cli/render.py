"""Human-readable output (rich only here). The CLI passes results in; nothing is computed here.

rich is imported by the functions that draw with it, not by this module: ``--json`` output
and a run whose stderr is not a terminal (no spinner to show) never load it. An operation's
result (and an error) written where stdout (stderr) is not a terminal is plain text, the same
words without styling or folding, and does not load rich either (``PlainConsole``). ``status``
there writes the very characters rich would draw (its table, at rich's width) without rich
when nothing would be folded, escaped or replaced, and lets rich draw it otherwise.

A result with many files is summarized per fix (files, lines added and removed); per-file
rows come with ``verbose`` or when a fix touches few files. Diffs are shown when asked for or
when few files changed, colored only on a terminal and for a diff small enough to color
quickly; otherwise written as plain text (docs/cli.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any, ContextManager, Iterable, List, Mapping, Tuple

from ..errors import PatchkitError
from ..results import CheckResult, FileChange, FixOutcome, OpResult

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

#: A fix touching more files than this is summarized unless verbose.
FEW_FILES = 20
#: Files not ok listed per fix by ``status``; the rest are counted.
STATUS_FILES = 5
#: Diffs longer than this (characters, in all) are written plainly even on a terminal:
#: rich's syntax highlighting takes seconds on megabytes.
COLOR_DIFF_LIMIT = 200_000

OUTCOME_STYLE = {
    "applied": "bold green",
    "already-applied": "green",
    "would-apply": "cyan",
    "upgraded": "bold green",
    "would-upgrade": "cyan",
    "rolled-back": "bold yellow",
    "would-roll-back": "yellow",
    "verified": "bold green",
    "failed": "bold red",
    "not-applied": "dim",
}
STATE_STYLE = {
    "applied": "green",
    "drifted": "bold red",
    "not-applied": "dim",
    "partly-present": "yellow",
    "present-unrecorded": "cyan",
    "outdated": "yellow",
    "not-needed": "dim",
}


def stdout() -> Console:
    """The console for a command's output. Where stdout is not a terminal it is a
    :class:`LazyConsole`: ``status`` writes its table without rich when rich would draw the
    same characters; anything else it is asked for loads rich then."""
    if plain_output():
        return LazyConsole()  # type: ignore[return-value]
    return _rich_stdout()


def _rich_stdout() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=False)


def busy(message: str, *, quiet: bool = False) -> ContextManager[Any]:
    """A spinner on stderr while a long call runs; nothing when ``quiet`` or stderr is not a
    terminal (rich would draw nothing there either)."""
    if quiet or not sys.stderr.isatty():
        return contextlib.nullcontext()
    return stderr().status(message)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


#: A line of output as (text, rich style) segments: drawn by rich on a terminal, written as
#: the same words without styling elsewhere (what git does when piped).
Segments = List[Tuple[str, str]]


def plain_output(stream: Any = None) -> bool:
    """Whether output to ``stream`` (stdout) goes out as plain text, without loading rich:
    not a terminal, unless FORCE_COLOR asks for rich's styling anyway."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not (isatty is not None and isatty()) and not os.environ.get("FORCE_COLOR")


class PlainConsole:
    """The part of rich's Console the result renderers use, writing plain text (no rich
    import: half the time of a small apply went to loading rich and drawing with it)."""

    is_terminal = False

    def __init__(self, file: Any = None) -> None:
        self.file = sys.stdout if file is None else file

    def line(self, segments: Segments) -> None:
        self.file.write("".join(text for text, _style in segments) + "\n")


class LazyConsole:
    """Stands for rich's stdout Console without loading rich: every attribute but those
    below comes from a real Console, made on first use."""

    def __init__(self) -> None:
        self._real: Any = None

    def real(self) -> Console:
        if self._real is None:
            self._real = _rich_stdout()
        return self._real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


# What rich replaces with an emoji in printed text (rich._emoji_replace); a code that is all
# digits other than these names none, so a time like 20:13:45 is printed as it is.
_EMOJI_CODE = r"(:(\S*?)(?:(?:\-)(emoji|text))?:)"
_NUMERIC_EMOJI = ("100", "1234")
#: The width rich gives a console when neither COLUMNS nor a terminal on fd 0, 1, 2 says one.
_PIPE_WIDTH = 80


def _pipe_width() -> int | None:
    """The width rich's Console would draw at (``Console.size``), or None when unsure."""
    if "TTY_COMPATIBLE" in os.environ or "TTY_INTERACTIVE" in os.environ:
        return None
    columns = os.environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        return int(columns) or None
    for fd in (0, 1, 2):
        try:
            size = os.get_terminal_size(fd)
        except (OSError, ValueError):
            continue
        return size.columns or _PIPE_WIDTH
    return _PIPE_WIDTH


def _as_rich_prints(text: str) -> bool:
    """Whether rich prints ``text`` (escaped markup) unchanged: printable ASCII, no markup
    escapes and no emoji code."""
    if not (text.isascii() and text.isprintable()) or "[" in text or "\\" in text:
        return False
    if ":" in text:
        import re

        for match in re.finditer(_EMOJI_CODE, text):
            name = match.group(2)
            if match.group(3) or not name.isdigit() or name in _NUMERIC_EMOJI:
                return False
    return True


def _plain_status(lines: List[str], table: List[List[str]], right: Tuple[int, ...],
                  title: str, width: int) -> List[str] | None:
    """The lines rich draws for ``status`` on a non-terminal ``width`` wide, or None when
    rich would fold or change something (then rich draws it)."""
    texts = [*lines, title, *(cell for row in table for cell in row)]
    if not all(_as_rich_prints(t) for t in texts) or any(len(line) > width for line in lines):
        return None
    if len(table) == 1:  # the header alone: no row
        line = f"no fix applied or present on {title[len('status of '):]}"
        return [*lines, line] if len(line) <= width and _as_rich_prints(line) else None
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    total = sum(widths) + 2 * len(widths)  # box=None: one space of padding each side
    if total > width or len(title) > total:
        return None
    out = [*lines, title.ljust(total)]
    for row in table:
        cells = [(cell.rjust(w) if i in right else cell.ljust(w))
                 for i, (cell, w) in enumerate(zip(row, widths))]
        out.append(" " + "  ".join(cells) + " ")
    return out


def _emit(console: Any, segments: Segments, soft_wrap: bool = False) -> None:
    """One line of segments to a rich Console (styled) or a PlainConsole."""
    if isinstance(console, PlainConsole):
        console.line(segments)
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


def _hunk_summary(f: FileChange) -> str:
    if not f.hunks:
        return ""
    places = ", ".join(
        f"{h.line}" + (f" (offset {h.offset:+d})" if h.offset else "") for h in f.hunks
    )
    noun = "hunk" if len(f.hunks) == 1 else "hunks"
    return f"{len(f.hunks)} {noun} at line {places}"


def diff_stat(diff: str) -> tuple[int, int]:
    """Lines added and removed by a unified diff (its ---/+++ headers not counted).

    Counted with ``str.count`` on the hunks of each file's section, so megabytes of diff
    take milliseconds."""
    added = removed = 0
    for section in ("\n" + diff).split("\ndiff --git "):
        start = section.find("\n@@")
        if start < 0:
            continue
        body = section[start:]
        added += body.count("\n+")
        removed += body.count("\n-")
    return added, removed


def _files_summary(files: tuple[FileChange, ...]) -> str:
    ops = {"modify": 0, "create": 0, "delete": 0}
    added = removed = 0
    for f in files:
        ops[f.op] = ops.get(f.op, 0) + 1
        plus, minus = diff_stat(f.diff)
        added += plus
        removed += minus
    kinds = ", ".join(f"{n} {label}" for label, n in (("modified", ops["modify"]),
                      ("created", ops["create"]), ("deleted", ops["delete"])) if n)
    noun = "file" if len(files) == 1 else "files"
    return f"{len(files)} {noun} changed ({kinds}), +{added} -{removed} lines"


def write_diff(console: Any, diff: str, *, color: bool) -> None:
    """A diff, highlighted with ``color`` on a terminal, else as the plain text it is."""
    if color and console.is_terminal:
        from rich.syntax import Syntax

        console.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))
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
        version = f" v{fix.from_version} -> v{fix.version}"
    _emit(console, [(f"{fix.outcome} ", style), (f"{fix.name}{version}", "bold")])
    if fix.drifted and fix.outcome == "already-applied":
        _drifted(console, fix)
    _commits(console, fix)
    op_mark = {"modify": "M", "create": "A", "delete": "D"}
    rows = verbose or len(fix.files) <= FEW_FILES
    if fix.files and not rows:
        _emit(console, [("  ", ""), (_files_summary(fix.files), ""), ("  (-v lists them)", "dim")])
    for f in fix.files:
        if rows:
            line: Segments = [(f"  {op_mark.get(f.op, f.op)} ", ""), (f"{f.root}:{f.path}", "bold")]
            if not all_checks:
                summary = _hunk_summary(f)
                if summary:
                    line.append((f"  {summary}", "dim"))
            _emit(console, line)
            if all_checks:
                for h in f.hunks:
                    where = f"line {h.line}"
                    if h.offset:
                        where += f" (offset {h.offset:+d} from {h.expected_line})"
                    _emit(console, [(f"      hunk #{h.index} of {h.patch} at {where}", "dim")])
        if show_diff and f.diff:
            write_diff(console, f.diff, color=color_diff)
    pre = list(fix.preconditions)
    if pre:
        failed = [c for c in pre if not c.ok]
        # A dry run lists every check, unless there are many (one per file of a large series).
        listed = pre if all_checks and (verbose or len(pre) <= FEW_FILES) else failed
        if listed:
            _emit(console, [("  preconditions:", "")])
            for c in listed:
                _emit(console, [("    ", "")] + _check_line(c))
        if not failed and len(listed) < len(pre):
            _emit(console, [("  ", ""), ("✓ ", "green"), (f"{len(pre)} preconditions passed", "")])
    if fix.verification:
        _emit(console, [("  verification:", "")])
        for c in fix.verification:
            _emit(console, [("    ", "")] + _check_line(c))


def _commits(console: Any, fix: FixOutcome) -> None:
    """The commits the run made for the fix, whole ids (to copy into git), and what it reverted."""
    reverted = (fix.reverts or {}).get("commit")
    if reverted and fix.outcome in ("rolled-back", "would-roll-back"):
        _emit(console, [("  reverts commit ", ""), (str(reverted), "bold")])
    for c in fix.commits:
        _emit(console, [("  commit ", ""), (str(c.get("sha")), "bold"), (f" (root {c.get('root')})", "")])


def _drifted(console: Any, fix: FixOutcome) -> None:
    """An applied fix whose files changed since patchkit wrote them: which, and what to do."""
    for f in fix.drifted[:STATUS_FILES]:
        _emit(console, [("  drifted: ", STATE_STYLE["drifted"]),
                        (f"{f.get('root')}:{f.get('path')}", "bold"),
                        (" (deleted since patchkit wrote it)" if f.get("state") == "missing"
                         else " (changed since patchkit wrote it)", "")])
    if len(fix.drifted) > STATUS_FILES:
        _emit(console, [(f"  and {len(fix.drifted) - STATUS_FILES} more (--json lists them)", "")])
    _emit(console, [(f"  the fix is recorded but its files no longer hold what it wrote; "
                     f"patchkit verify {fix.name} fails until they do. To put it back as written: "
                     f"patchkit rollback --force {fix.name}, then patchkit apply {fix.name} (the "
                     f"edits are lost); to keep the edits, make them a new version "
                     f"(patchkit refresh {fix.name} --from CHECKOUT)", "yellow")])


def _recovered(console: Any, result: OpResult) -> None:
    for rec in result.recovered:
        _emit(console, [("recovered", "yellow"),
                        (f" an interrupted {rec.get('op')} of {', '.join(rec.get('fixes') or [])}: "
                         f"{rec.get('outcome')}", "")])


def render_result(console: Any, result: OpResult, *, show_diff: bool | None = None,
                  verbose: bool = False) -> None:
    """``show_diff`` None: a dry run shows its diff when it changes few files (FEW_FILES).

    ``console`` None: stdout, drawn by rich on a terminal and as plain text elsewhere."""
    if console is None:
        console = PlainConsole() if plain_output() else stdout()
    total = sum(len(fix.files) for fix in result.fixes)
    if show_diff is None:
        show_diff = result.dry_run and total <= FEW_FILES
    size = sum(len(f.diff) for fix in result.fixes for f in fix.files) if show_diff else 0
    _recovered(console, result)
    verb = {"apply": "apply", "rollback": "rollback", "verify": "verify"}.get(result.op, result.op)
    head = "dry run of " if result.dry_run else ""
    _emit(console, [(f"{head}{verb}", "bold"), (f" on {result.target}", "")])
    for fix in result.fixes:
        render_fix_outcome(
            console,
            fix,
            show_diff=show_diff,
            all_checks=result.dry_run,
            verbose=verbose,
            color_diff=size <= COLOR_DIFF_LIMIT,
        )


def _status_rows(result: OpResult, verbose: bool) -> List[List[str]]:
    rows = []
    for s in result.status:
        if s.state == "not-applied" and not verbose:
            continue
        bad = [f"{f.get('path')} ({f.get('state')})" for f in s.files if f.get("state") != "ok"]
        if len(bad) > STATUS_FILES:  # a drifted release series: thousands of files
            bad = bad[:STATUS_FILES] + [f"and {len(bad) - STATUS_FILES} more (--json lists them)"]
        state = s.state
        if state == "outdated":
            state = f"outdated (v{s.version} applied, v{s.catalog_version} in the catalog)"
        rows.append([
            s.name,
            state,
            "" if s.version is None or s.state not in ("applied", "drifted", "outdated")
            else f"v{s.version}",
            s.applied_at or "",
            ", ".join(bad),
        ])
    return rows


def render_status(console: Console, result: OpResult, *, verbose: bool = False) -> None:
    if isinstance(console, LazyConsole):
        width = _pipe_width()
        if width is not None:
            recovered = [f"recovered an interrupted {rec.get('op')} of "
                         f"{', '.join(rec.get('fixes') or [])}: {rec.get('outcome')}"
                         for rec in result.recovered]
            header = ["fix", "state", "version", "applied at", "files"]
            plain = _plain_status(recovered, [header, *_status_rows(result, verbose)], (2,),
                                  f"status of {result.target}", width)
            if plain is not None:
                sys.stdout.write("".join(line + "\n" for line in plain))
                return
        console = console.real()
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    for rec in result.recovered:
        console.print(
            f"[yellow]recovered[/] an interrupted {escape(str(rec.get('op')))} of "
            f"{escape(', '.join(rec.get('fixes') or []))}: {escape(str(rec.get('outcome')))}"
        )
    table = Table(title=f"status of {escape(result.target)}", title_justify="left", box=None)
    table.add_column("fix", style="bold")
    table.add_column("state")
    table.add_column("version", justify="right")
    table.add_column("applied at", style="dim")
    table.add_column("files")
    for name, state, version, applied_at, files in _status_rows(result, verbose):
        table.add_row(
            escape(name),
            Text(state, style=STATE_STYLE.get(state.split(" ", 1)[0], "")),
            version,
            escape(applied_at),
            escape(files),
        )
    if table.row_count:
        console.print(table)
    else:
        console.print(f"no fix applied or present on {escape(result.target)}")


def render_fix_list(console: Console, fixes: Iterable[Any]) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None)
    table.add_column("fix", style="bold")
    table.add_column("version", justify="right")
    table.add_column("status")
    table.add_column("base")
    table.add_column("title")
    for fix in fixes:
        style = "" if fix.status == "active" else "dim"
        table.add_row(
            escape(fix.name),
            f"v{fix.version}",
            Text(fix.status, style=style),
            escape(fix.upstream.base_release),
            escape(fix.title),
        )
    console.print(table)


def render_fix(console: Console, fix: Any, files: Mapping[str, list[str]]) -> None:
    """A fix as a good commit message: subject, body, then trailers."""
    from rich.markup import escape
    from rich.text import Text

    console.print(Text(fix.title, style="bold"))
    console.print()
    console.print(escape(fix.rationale.strip()))
    console.print()
    trailers = [
        ("Fix", f"{fix.name} v{fix.version}"),
        ("Status", fix.status),
        ("Upstream", f"{fix.upstream.project} {fix.upstream.base_release} ({fix.upstream.forwarding})"),
        ("Applies-to", ", ".join(fix.upstream.releases)),
    ]
    for dep in fix.depends_on:
        trailers.append(("Depends-on", dep))
    for sup in fix.supersedes:
        trailers.append(("Supersedes", sup))
    if fix.reverts:
        trailers.append(("Reverts", fix.reverts))
    for p in fix.patches:
        touched = ", ".join(files.get(p.file, []))
        trailers.append(("Patch", f"{p.file} [{p.root}] {touched}"))
    for check in fix.preconditions:
        trailers.append(("Precondition", check.describe()))
    for check in fix.verification:
        trailers.append(("Verification", check.describe()))
    if fix.rollback.notes:
        trailers.append(("Rollback", f"{fix.rollback.strategy}: {fix.rollback.notes.strip()}"))
    for key, value in trailers:
        console.print(Text.assemble((f"{key}: ", "cyan"), value))


def render_error(console: Any, err: PatchkitError) -> None:
    """``console`` None: stderr, drawn by rich on a terminal and as plain text elsewhere."""
    if console is None:
        console = PlainConsole(sys.stderr) if plain_output(sys.stderr) else stderr()
    # Never folded to the terminal width: the message names files and commands to copy.
    _emit(console, [("error: ", "bold red"), (err.message, "")], soft_wrap=True)
    # The message already lists every failed check (fix, check, where, detail), so the
    # checks carried by err.result are not repeated here.
    result = getattr(err, "result", None)
    if result is not None:
        for rec in result.recovered:
            _emit(console, [("note:", "yellow"), (f" recovered an interrupted {rec.get('op')}", "")])


def render_lineage(console: Console, fixes: Iterable[Any], states: Mapping[str, str] | None = None) -> None:
    """Loaded fixes with a target's states by name, drawn like ``patchkit log``."""
    from ..catalog.lineage import from_fixes

    render_log(console, from_fixes(fixes, states=states))


_LINK_LABELS = (  # what the fix builds on, then what builds on it
    ("depends_on", "depends on"),
    ("supersedes", "supersedes"),
    ("reverts", "reverts"),
    ("depended_on_by", "needed by"),
    ("superseded_by", "superseded by"),
    ("reverted_by", "reverted by"),
)


def _log_header(lineage: Any) -> Text:
    from rich.text import Text

    count = len(lineage.fixes)
    head = Text.assemble(("lineage", "bold"), f": {count} fix{'es' if count != 1 else ''}")
    if lineage.focus:
        head.append(f" linked to {lineage.focus}")
    head.append(", oldest first")
    if lineage.target:
        head.append(f"; applied on {lineage.target}")
    return head


def _fix_label(fix: Any) -> Text:
    from rich.text import Text

    first = fix.versions[0].date if fix.versions and fix.versions[0].date else "undated"
    label = Text.assemble((f"{first}  ", "dim"), (fix.name, "bold"), f"  v{fix.version}  ",
                          (fix.status, "green" if fix.status == "active" else "bold red"))
    applied = fix.applied
    if applied is not None and applied.state != "not-applied":
        where = f"{applied.state}" + (f" v{applied.version}" if applied.version is not None else "")
        if applied.applied_at:
            where += f" since {applied.applied_at}"
        for root, sha in applied.commits:
            where += f", commit {root}@{sha[:12]}"
        label.append(f"  [{where} on target]", style=STATE_STYLE.get(applied.state, ""))
    return label


def _version_label(fix: Any, v: Any) -> Text:
    from rich.text import Text

    label = Text.assemble((f"v{v.version}", "bold"), f"  {v.date or 'undated'}  on {v.base_release}")
    if v.rebased_from:
        label.append(f"  (rebased from {v.rebased_from})", style="yellow")
    applied = fix.applied
    if applied is not None and applied.version == v.version and applied.state != "not-applied":
        label.append(f"  <- {applied.state} on target", style=STATE_STYLE.get(applied.state, ""))
    return label


def render_log(console: Console, lineage: Any) -> None:
    """``patchkit log``: the fixes in lineage order as a tree, each with its links and versions."""
    from rich.text import Text
    from rich.tree import Tree

    tree = Tree(_log_header(lineage))
    for fix in lineage.fixes:
        node = tree.add(_fix_label(fix))
        node.add(Text(fix.title, style="italic"))
        node.add(Text(f"upstream {fix.base_release}, {fix.forwarding}", style="dim"))
        for attr, label in _LINK_LABELS:
            names = getattr(fix.links, attr)
            if names:
                node.add(f"{label} {names if isinstance(names, str) else ', '.join(names)}")
        if fix.revert is not None:
            what = f"commit {fix.revert['commit'][:12]}" if fix.revert["commit"] else \
                f"the commit of {fix.revert['fix']}"
            node.add(f"git revert of {what} in root {fix.revert['root']}")
        if fix.status in ("dead", "superseded"):
            replaced = ", ".join(fix.replaced_by) or "nothing in the catalog"
            node.add(Text(f"{fix.status}: replaced by {replaced}", style="red"))
        for v in fix.versions:
            vnode = node.add(_version_label(fix, v))
            if v.summary:
                vnode.add(Text(v.summary))
            for c in v.commits:
                vnode.add(Text(f"{c.sha[:12]}  {c.date[:10]}  {c.subject}", style="dim"))
            if lineage.history and not v.commits:
                vnode.add(Text("no catalog commit", style="dim"))
    console.print(tree)


# -- patchkit rebase / patchkit diff ------------------------------------------------------

REBASE_STYLE = {
    "unchanged": "green", "offset": "green", "merged": "cyan", "resolved": "cyan",
    "upstream": "magenta", "anchor-gone": "bold red", "conflict": "bold red",
    "rebased": "bold green", "extended": "green", "upstreamed": "magenta",
    "stopped": "bold red", "skipped": "dim",
}


class rebase_progress:  # noqa: N801 - used as a context manager, like rich's own
    """A rich progress bar fed by ``patchkit.rebase``'s ``progress(what, done, total)``."""

    def __init__(self, console: Console, *, enabled: bool = True) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.enabled = enabled
        self.bar = Progress(TextColumn("rebasing"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.description}"), console=console, transient=True)
        self.task = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        self.bar.__enter__()
        self.task = self.bar.add_task("", total=None)

        def update(what: str, done: int, total: int) -> None:
            kw: dict[str, Any] = {"description": what, "completed": done}
            if total >= 0:
                kw["total"] = total
            self.bar.update(self.task, **kw)

        return update

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)


def render_rebase(console: Console, report: Any) -> None:
    """The table of a rebase: one row per patch (or per fix without patches)."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"rebase onto {report.onto}", show_lines=False)
    for col in ("fix", "version", "patch", "result", "detail"):
        table.add_column(col, overflow="fold")
    for fix in report.fixes:
        ver = f"v{fix.old_version}" + (f" -> v{fix.new_version}"
                                       if fix.new_version != fix.old_version else "")
        outcome = Text(fix.outcome, style=REBASE_STYLE.get(fix.outcome, ""))
        if not fix.patches:
            table.add_row(fix.name, ver, "", outcome, escape(fix.detail))
        for i, p in enumerate(fix.patches):
            # a skipped fix is skipped on every row: nothing of it was written, whatever its
            # patches were classified (the classification stays in the detail)
            result = outcome if fix.outcome == "skipped" else Text(
                p.classification, style=REBASE_STYLE.get(p.classification, ""))
            detail = (f"{p.classification}: {p.detail}" if fix.outcome == "skipped"
                      else p.detail)
            table.add_row(fix.name if i == 0 else "", ver if i == 0 else "", p.file,
                          result, escape(detail))
    console.print(table)
    if report.stopped:
        _render_rebase_stop(console, report)
    elif getattr(report, "not_written", ""):
        console.print(f"nothing was written ({escape(report.not_written)}): what a rebase onto "
                      f"{escape(report.onto)} would do; no rebase is in progress")
    else:
        console.print("rebase done")


def _render_rebase_stop(console: Console, report: Any) -> None:
    from rich.markup import escape

    console.print(f"[bold red]stopped at {escape(report.stopped)}[/]: resolve the conflicts "
                  f"in {escape(report.worktree or '')}")
    for path in report.conflicted:
        console.print(f"  {escape(path)}")
    console.print("then run `patchkit rebase --continue` (or --skip, --abort)")


def render_rebase_in_progress(console: Console, report: Any) -> None:
    """A bare ``patchkit rebase`` during a rebase: where it is and what to do (git status)."""
    from rich.markup import escape

    done = [f for f in report.fixes if f.name != report.stopped]
    console.print(f"rebase onto {escape(report.onto)} in progress: {len(done)} fix(es) done"
                  + (f", still to do after the stopped one: {escape(', '.join(report.remaining))}"
                     if report.stopped and report.remaining else ""))
    if not report.stopped:
        left = ", ".join(report.remaining)
        console.print(f"it was interrupted before {escape(left or 'its end')}: run `patchkit "
                      "rebase --continue` to go on, or `patchkit rebase --abort` to put the "
                      "catalog back")
        return
    stop = next(f for f in report.fixes if f.name == report.stopped)
    patch = stop.patches[-1] if stop.patches else None
    if patch is not None:
        console.print(f"stopped at {escape(stop.name)}, patch {escape(patch.file)} "
                      f"({escape(patch.classification)}: {escape(patch.detail)})")
    console.print(f"  resolve the conflicts in {escape(report.worktree or '')}:")
    for path in report.conflicted:
        console.print(f"    {escape(path)}")
    console.print("  (edit the files there, then run `patchkit rebase --continue`)")
    console.print("  (use `patchkit rebase --skip` to leave this fix as it is and go on)")
    console.print("  (use `patchkit rebase --abort` to put the catalog back as it was)")


def render_range_diff(console: Console, text: str) -> None:
    from rich.syntax import Syntax
    from rich.text import Text

    console.print(Syntax(text, "diff", theme="ansi_dark", background_color="default")
                  if text else Text("no difference", style="dim"))
