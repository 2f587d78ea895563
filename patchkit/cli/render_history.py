"""How `patchkit log`, `rebase` and `diff` are shown: rich on a terminal, plain elsewhere."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, List, Tuple

from .render import STATE_STYLE, PlainConsole, Segments, broken_detail, line, write_diff, write_table

# -- patchkit log --------------------------------------------------------------------------

#: A tree: its label and its children.
Node = Tuple[Segments, List[Any]]
#: rich's tree guides: the prefix of a child, of the last child, and under each of them.
_GUIDES = (("├── ", "│   "), ("└── ", "    "))


def write_tree(console: Any, root: Node) -> None:
    """A tree drawn by rich on a terminal; plain, with the same guides, never folded."""
    if not isinstance(console, PlainConsole):
        from rich.text import Text
        from rich.tree import Tree

        def build(node: Node, parent: Any = None) -> Any:
            label = Text.assemble(*node[0])
            tree = Tree(label) if parent is None else parent.add(label)
            for child in node[1]:
                build(child, tree)
            return tree

        console.print(build(root))
        return

    def walk(node: Node, first: str, rest: str) -> None:
        label, children = node
        for i, text in enumerate("".join(t for t, _ in label).split("\n")):
            console.file.write(f"{first if i == 0 else rest}{text}\n")
        for i, child in enumerate(children):
            branch, under = _GUIDES[i == len(children) - 1]
            walk(child, rest + branch, rest + under)

    walk(root, "", "")


_LINK_LABELS = (  # what the fix builds on, then what builds on it
    ("depends_on", "depends on"), ("supersedes", "supersedes"), ("reverts", "reverts"),
    ("depended_on_by", "needed by"), ("superseded_by", "superseded by"), ("reverted_by", "reverted by"),
)


def _log_header(lineage: Any) -> Segments:
    count = len(lineage.fixes)
    head: Segments = [("lineage", "bold"), (f": {count} fix{'es' if count != 1 else ''}", "")]
    if lineage.focus:
        head.append((f" linked to {lineage.focus}", ""))
    head.append((", oldest first", ""))
    if lineage.target:
        head.append((f"; applied on {lineage.target}", ""))
    if lineage.broken:
        head.append((f"; {len(lineage.broken)} manifest(s) cannot be read", "bold red"))
    return head


def _fix_label(fix: Any) -> Segments:
    first = fix.versions[0].date if fix.versions and fix.versions[0].date else "undated"
    label: Segments = [(f"{first}  ", "dim"), (fix.name, "bold"), (f"  v{fix.version}  ", ""),
                       (fix.status, "green" if fix.status == "active" else "bold red")]
    applied = fix.applied
    if applied is not None and applied.state != "not-applied":
        where = f"{applied.state}" + (f" v{applied.version}" if applied.version is not None else "")
        if applied.applied_at:  # applied (and outdated) since then; lost, drifted... since
            # some later time nobody recorded: the time is the apply's, said as that
            where += (f" since {applied.applied_at}" if applied.state in ("applied", "outdated")
                      else f", applied {applied.applied_at}")
        for root, sha in applied.commits:
            where += f", commit {root}@{sha[:12]}"
        label.append((f"  [{where} on target]", STATE_STYLE.get(applied.state, "")))
    return label


def _version_node(fix: Any, v: Any, history: bool) -> Node:
    label: Segments = [(f"v{v.version}", "bold"), (f"  {v.date or 'undated'}  on {v.base_release}", "")]
    if v.rebased_from:
        label.append((f"  (rebased from {v.rebased_from})", "yellow"))
    if v.serves and sum(bool(o.serves) for o in fix.versions) > 1:  # a fix with variants
        label.append((f"  serves {', '.join(v.serves)}", "green"))
    applied = fix.applied
    if applied is not None and applied.version == v.version and applied.state != "not-applied":
        label.append((f"  <- {applied.state} on target", STATE_STYLE.get(applied.state, "")))
    children: List[Node] = [([(v.summary, "")], [])] if v.summary else []
    children += [([(f"{c.sha[:12]}  {c.date[:10]}  {c.subject}", "dim")], []) for c in v.commits]
    if history and not v.commits:
        children.append(([("no catalog commit", "dim")], []))
    return label, children


def _fix_node(fix: Any, history: bool) -> Node:
    # "upstream 0.5.23, not-forwarded" read as "upstream has it in 0.5.23"; and beside a mark,
    # a bare "not-forwarded" (or "merged") read as a claim about how upstream got it (trials)
    upstream = f"based on {fix.base_release}; forwarding: {fix.forwarding}"
    if fix.upstream_since:  # the mark, as status says it
        upstream = f"in upstream since {fix.upstream_since} ({upstream})"
    children: List[Node] = [([(fix.title, "italic")], []), ([(upstream, "dim")], [])]
    for attr, label in _LINK_LABELS:
        names = getattr(fix.links, attr)
        if names:
            names = names if isinstance(names, str) else ", ".join(names)
            children.append(([(f"{label} {names}", "")], []))
    if fix.revert is not None:
        what = f"commit {fix.revert['commit'][:12]}" if fix.revert["commit"] else \
            f"the commit of {fix.revert['fix']}"
        children.append(([(f"git revert of {what} in root {fix.revert['root']}", "")], []))
    if fix.status in ("dead", "superseded"):
        replaced = ", ".join(fix.replaced_by) or "nothing in the catalog"
        children.append(([(f"{fix.status}: replaced by {replaced}", "red")], []))
    children += [_version_node(fix, v, history) for v in fix.versions]
    return _fix_label(fix), children


def render_log(console: Any, lineage: Any) -> None:
    """``patchkit log``: the fixes in lineage order as a tree, each with its links and versions."""
    broken: List[Node] = [([(b.name, "bold"), ("  ", ""), ("error", "bold red"),
                            (f"  {broken_detail(b)}", "")], []) for b in lineage.broken]
    write_tree(console, (_log_header(lineage),
                         [_fix_node(f, lineage.history) for f in lineage.fixes] + broken))


# -- patchkit rebase, patchkit diff --------------------------------------------------------

REBASE_STYLE = {
    "unchanged": "green", "offset": "green", "merged": "cyan", "resolved": "cyan",
    "upstream": "magenta", "anchor-gone": "bold red", "conflict": "bold red",
    "ambiguous": "bold yellow", "removed-upstream": "bold yellow", "reverted-upstream": "yellow",
    "rebased": "bold green", "extended": "green", "upstreamed": "magenta",
    "stopped": "bold red", "skipped": "dim",
}


@contextlib.contextmanager
def rebase_progress(console: Any) -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar on stderr fed by ``patchkit.rebase``'s ``progress(what, done, total)``;
    off a terminal, plain progress lines (``render.PlainProgress``)."""
    if not console.is_terminal:
        from .render import PlainProgress

        with PlainProgress("") as plain:  # a line counts the fix it starts: 1/N to N/N
            yield lambda what, done, total: plain.update(
                what + (f" ({done + 1}/{total})" if total >= 0 else "") if what else "")
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as bar:
        task = bar.add_task("", total=None)

        def update(what: str, done: int, total: int) -> None:
            extra: dict[str, Any] = {"total": total} if total >= 0 else {}
            bar.update(task, description=what, completed=done, **extra)

        yield update


def render_rebase(console: Any, report: Any, cmd: str = "patchkit rebase") -> None:
    """The table of a rebase: one row per patch (or per fix without patches). Off a terminal,
    plain tab-separated lines as every command writes them: ``FIX VERSION PATCH RESULT DETAIL``,
    the fix and version on each of its rows (docs/cli.md, Piped output)."""
    rows: list[list[str]] = []
    for fix in report.fixes:
        ver = f"v{fix.old_version}" + (f" -> v{fix.new_version}"
                                       if fix.new_version != fix.old_version else "")
        if not fix.patches:
            rows.append([fix.name, ver, "", fix.outcome, fix.detail])
        for p in fix.patches:
            # nothing of a skipped fix was written: every row says so (its classification in the detail)
            result = fix.outcome if fix.outcome == "skipped" else p.classification
            detail = (f"{p.classification}: {p.detail}" if fix.outcome == "skipped"
                      else p.detail)
            rows.append([fix.name, ver, p.file, result, detail])
    if isinstance(console, PlainConsole):
        write_table(console, rows)
    else:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(f"rebase onto {report.onto}"), show_lines=False)
        for col in ("fix", "version", "patch", "result", "detail"):
            table.add_column(col, overflow="fold")
        previous = None
        for name, ver, patch, result, detail in rows:
            first = name != previous
            previous = name
            table.add_row(name if first else "", ver if first else "", patch,
                          Text(result, style=REBASE_STYLE.get(result, "")), Text(detail))
        console.print(table)
    failing = [f for f in report.fixes if getattr(f, "unverified", ())]
    for fix in failing:
        for said in fix.unverified:
            line(console, [(f"warning: {fix.name} v{fix.new_version} fails its own verification "
                            f"on {report.onto}: ", "yellow"), (said, "")])
    if failing:
        line(console, [("its checks are those of the version it was rebased from: update that "
                        "[[verification]] in the manifest for the new version before a host "
                        "applies it (every apply would fail after writing; `patchkit matrix` "
                        "says `verify fails` until then)", "")])
    stop = next((f for f in report.fixes if f.name == report.stopped), None)
    human = stop is not None and bool(stop.patches) and \
        stop.patches[-1].classification in ("ambiguous", "removed-upstream")
    if human:  # nothing was applied: the worktree holds the release's files
        assert stop is not None  # `human` requires it
        line(console, [(f"stopped at {report.stopped}", "bold red"),
                       ((f": {stop.patches[-1].classification}, a human decides; the "
                         f"release's files are in {report.worktree or ''}: `--continue` as they "
                         "are means already upstream, `--skip` leaves the fix as it was"), "")])
    elif report.stopped:
        line(console, [(f"stopped at {report.stopped}", "bold red"),
                       (f": resolve the conflicts in {report.worktree or ''}", "")])
        for path in report.conflicted:
            line(console, [(f"  {path}", "")])
        line(console, [(f"then run `{cmd} --continue` (or --skip, --abort)", "")])
    elif report.not_written:
        line(console, [(f"nothing was written ({report.not_written}): what a rebase onto "
                        f"{report.onto} would do; no rebase is in progress", "")])
    else:
        from ..rebase.state import WRITTEN  # here: `log` renders without the rebase modules

        moved = [f.name for f in report.fixes if f.outcome in WRITTEN]
        line(console, [("rebase done", ""), ((
            f": {len(moved)} fix(es) written; review the catalog's diff and commit it "
            "(`patchkit log` and `diff --versions` read each version from the catalog's git "
            "history)") if moved else ": nothing to write (no fix moved)", "")])


def render_rebase_in_progress(console: Any, report: Any, cmd: str = "patchkit rebase") -> None:
    """A bare ``patchkit rebase`` during a rebase: where it is and what to do (git status);
    ``cmd``: the command to name (with the ``--catalog`` the user gave)."""
    done = [f for f in report.fixes if f.name != report.stopped]
    todo = (f", still to do after the stopped one: {', '.join(report.remaining)}"
            if report.stopped and report.remaining else "")
    say = [f"rebase onto {report.onto} in progress: {len(done)} fix(es) done{todo}"]
    if not report.stopped:
        left = ", ".join(report.remaining)
        say.append(f"it was interrupted before {left or 'its end'}: run `{cmd} --continue` to "
                   f"go on, or `{cmd} --abort` to put the catalog back")
    else:
        stop = next(f for f in report.fixes if f.name == report.stopped)
        if stop.patches:
            patch = stop.patches[-1]
            say.append(f"stopped at {stop.name} v{stop.old_version}, patch {patch.file} "
                       f"({patch.classification}: {patch.detail})")
        say.append(f"  resolve the conflicts in {report.worktree or ''}:")
        say += [f"    {path}" for path in report.conflicted]
        say += [f"  (edit the files there, then run `{cmd} --continue`)",
                f"  (use `{cmd} --skip` to leave this fix as it is and go on)",
                f"  (use `{cmd} --abort` to put the catalog back as it was)"]
    for text in say:
        line(console, [(text, "")])


def render_range_diff(console: Any, text: str) -> None:
    """A range-diff: colored on a terminal, the whole text as it is elsewhere (never cropped)."""
    if text:
        write_diff(console, text, color=True)
    else:
        line(console, [("no difference", "dim")])
