"""Plain output off a terminal: the same words rich draws, without styling or folding."""

from __future__ import annotations

import io
from pathlib import Path

from patchkit.cli import render, render_status
from patchkit.errors import PreconditionFailed
from patchkit.results import OpResult

RAW = {
    "format": 1, "op": "apply", "ok": True, "dry_run": True, "status": None, "error": None,
    "recovered": [{"op": "rollback", "fixes": ["old-fix"], "outcome": "rolled-back"}],
    "fixes": [{
        "name": "pool-guard", "version": 3, "outcome": "would-apply",
        "files": [{"root": "sglang", "path": "python/sglang/srt/" + "deep/" * 12 + "pool.py",
                   "op": "modify", "diff": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
                   "hunks": [{"index": 1, "patch": "0001-[guard].patch", "line": 40, "offset": 2,
                              "expected_line": 38}]}],
        "preconditions": [{"kind": "grep", "name": "the [bold]pool[/] sizing", "ok": True,
                           "detail": "1 match", "where": "sglang:x"},
                          {"kind": "python-syntax", "name": "", "ok": False,
                           "detail": "line 3: invalid syntax", "where": "sglang:y.py"}],
        "verification": [],
    }],
}


def rich_text(result: OpResult) -> str:
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=10_000, color_system=None, highlight=False, soft_wrap=False)
    render.render_result(console, result)
    return out.getvalue()


def test_plain_result_has_the_words_rich_draws(tmp_path: Path) -> None:
    result = OpResult.from_engine(RAW, "sglang=" + str(tmp_path))
    out = io.StringIO()
    render.render_result(render.PlainConsole(out), result)
    text = out.getvalue()
    assert text == rich_text(result)  # line for line, with rich folding nothing
    lines = text.splitlines()
    assert lines[0] == "recovered an interrupted rollback of old-fix: rolled-back"
    assert lines[1] == f"dry run of apply on sglang={tmp_path}"
    assert "      hunk #1 of 0001-[guard].patch at line 40 (offset +2 from 38)" in lines
    assert "    ✓ the [bold]pool[/] sizing: 1 match" in lines  # brackets are text, not markup
    assert "    ✗ python-syntax: line 3: invalid syntax (sglang:y.py)" in lines
    assert "+b" in lines  # a dry run of few files shows its diff
    assert "\x1b[" not in text


def test_plain_output_only_off_a_terminal(monkeypatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert render.plain_output(io.StringIO()) and not render.plain_output(Tty())
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not render.plain_output(io.StringIO())


def test_plain_error_keeps_the_whole_message_on_one_line(monkeypatch) -> None:
    err = PreconditionFailed("fix a: " + "x" * 300 + " [see manifests/a.toml]")
    out = io.StringIO()
    render.render_error(render.PlainConsole(out), err)
    assert out.getvalue() == "error: " + err.message + "\n"


def test_plain_status_is_one_tab_separated_line_per_fix_and_notes_on_stderr(capsys) -> None:
    from patchkit.results import FixState

    many = tuple({"path": f"python/sglang/srt/{'deep/' * 30}f{i}.py", "state": "drifted"}
                 for i in range(7))
    result = OpResult("status", True, False, "sglang=/srv/sglang", (),
                      ({"op": "apply", "fixes": ["a"], "outcome": "rolled-back"},),
                      (FixState("a-fix-with-a-name-longer-than-any-terminal-column", "drifted", 2,
                                "2026-11-29T20:13:45Z", many),
                       FixState("old", "not-applied", None, None, ())), {})
    out = io.StringIO()
    render_status.render_status(render.PlainConsole(out), result)
    shown = ", ".join(f"{f['path']} (drifted)" for f in many[:5])
    assert out.getvalue() == ("a-fix-with-a-name-longer-than-any-terminal-column\tdrifted\tv2\t"
                              f"2026-11-29T20:13:45Z\t{shown}, and 2 more (--json lists them)\n")
    assert capsys.readouterr().err == "recovered an interrupted apply of a: rolled-back\n"
    out = io.StringIO()
    render_status.render_status(render.PlainConsole(out), result, verbose=True)
    assert out.getvalue().splitlines()[1] == "old\tnot-applied\t\t\t"


def test_a_terminal_table_folds_long_names_instead_of_cutting_them() -> None:
    """docs/cli.md: on a terminal, output is folded to its width; no name loses its end."""
    import io

    from rich.console import Console

    from patchkit.cli.render import write_table

    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=True, color_system=None)
    name = "revert-hicache-index-k-sync"
    write_table(console, [["prefill-1", "applied v1", "not-applied"]], ("host", "bold"),
                (name, {"applied": "green"}), ("dsv4-bf16-index-k", {"applied": "green"}))
    text = out.getvalue()
    assert "…" not in text  # rich's default cuts the header to 'revert-hicache-inde…'
    shown = "host" + name + "dsv4-bf16-index-k" + "prefill-1" + "applied v1" + "not-applied"
    assert sorted(c for c in text if not c.isspace()) == sorted(c for c in shown if not c.isspace())


def test_a_terminal_table_never_splits_a_state_or_a_time_and_puts_long_text_under_its_row() -> None:
    """At 80 columns ``status`` showed ``present-unrecord|ed`` and ``2026-12-04T17:3|0:44Z``
    (a new-user trial): every column but the last (free text) is kept whole; the last folds,
    and goes under its row when the others leave it too little room."""
    from rich.console import Console

    from patchkit.cli.render import STATE_STYLE, write_table

    rows = [["local-fix-with-a-long-name", "present-unrecorded", "v12", "2026-12-04T17:30:44Z",
             "the change is in the files already, not recorded by patchkit (a commit of the "
             "fork, or applied by hand): nothing to apply; see patchkit status"],
            ["short", "applied", "v1", "2026-12-04T17:31:02Z", ""]]
    columns = (("fix", "bold"), ("state", STATE_STYLE), ("version", "right"), ("applied", ""),
               ("detail", ""))
    for width in (140, 80, 60):
        out = io.StringIO()
        write_table(Console(file=out, width=width, force_terminal=True, color_system=None),
                    rows, *columns, title="status of T")
        lines = out.getvalue().splitlines()
        assert " ".join(" ".join(lines).split()).count("nothing to apply; see patchkit status") == 1
        assert all(len(line.rstrip()) <= width for line in lines), out.getvalue()
        if width < 80:  # narrower than the words themselves: they fold, as they must
            assert "local-fix-with-a-long-name" in out.getvalue()
            continue
        for word in ("local-fix-with-a-long-name", "present-unrecorded", "2026-12-04T17:30:44Z",
                     "2026-12-04T17:31:02Z", "applied", "detail"):
            assert any(word in line for line in lines), (width, word, out.getvalue())


def test_a_fleet_matrix_too_wide_for_the_terminal_is_a_row_per_host_and_fix() -> None:
    from rich.console import Console

    from patchkit.cli.fleet import render_matrix

    fixes = [f"revert-hicache-index-k-sync-{i}" for i in range(10)]
    cells = {host: {fix: {"state": "not-applied"} for fix in fixes} for host in ("h1", "h2")}
    out = io.StringIO()
    render_matrix(Console(file=out, width=120, force_terminal=True, color_system=None), cells)
    lines = out.getvalue().splitlines()
    for host in cells:
        for fix in fixes:
            assert any(host in line and fix in line and "not-applied" in line for line in lines), \
                out.getvalue()


def test_a_terminal_status_keeps_the_state_word_in_its_column_and_why_beside_it() -> None:
    """A long ``lost: ...`` reason filled the state column, and the version and time came after
    it, the time on a line of its own (a second trial): on a terminal the state column holds
    the state, and the reason goes to the last column with the files; piped, one field."""
    from rich.console import Console

    from patchkit.results import FixState

    why = ("sglang 0.5.22 -> 0.5.23: the checkout moved to another release, whose bytes the "
           "files hold. Apply the fix again onto the new release (patchkit sync)")
    result = OpResult("status", True, False, "sglang=/srv/sglang", (), (),
                      (FixState("dsv4-bf16-index-k", "lost", 3, "2026-12-04T18:36:58Z", (),
                                detail=why),), {})
    for width in (100, 140):
        out = io.StringIO()
        render_status.render_status(Console(file=out, width=width, force_terminal=True,
                                            color_system=None), result)
        lines = out.getvalue().splitlines()
        row = next(line for line in lines if "dsv4-bf16-index-k" in line)
        assert "lost" in row and "v3" in row and "2026-12-04T18:36:58Z" in row, out.getvalue()
        assert "sglang 0.5.22 -> 0.5.23" in " ".join(" ".join(lines).split())
    plain = io.StringIO()
    render_status.render_status(render.PlainConsole(plain), result)
    assert plain.getvalue().split("\t")[1] == f"lost: {why}"
