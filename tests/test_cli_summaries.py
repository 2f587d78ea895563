"""How the CLI shows a result: plain words when piped, rich when color is forced, and a result
with many files summarized unless asked for rows or the diff."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Callable, Iterable

import pytest

from patchkit.catalog import series
from tests.test_cli import INDEX_K, POOL, Env, Run, env, git, pk, tgt  # noqa: F401  (fixtures)

def run_counting_imports(env: Env, *args: str,
                         watched: Iterable[str] = ()) -> tuple[int, str, list[str]]:
    """The real ``main()`` in a fresh interpreter, stdout a pipe; which of the ``watched``
    modules it loaded."""
    code = (
        "import sys\n"
        "from patchkit.cli.main import main\n"
        "try:\n"
        f"    main({['--catalog', str(env.catalog), *args]!r})\n"
        "except SystemExit as exc:\n"
        "    code = exc.code or 0\n"
        f"loaded = sorted(m for m in {sorted(watched)!r} if m in sys.modules)\n"
        "sys.stderr.write('LOADED ' + ','.join(loaded) + '\\n')\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=env.tmp, timeout=120)
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("LOADED ")][-1]
    return proc.returncode, proc.stdout, [m for m in line[7:].split(",") if m]


def run_main(env: Env, *args: str) -> tuple[int, str]:
    code, out, _loaded = run_counting_imports(env, *args)
    return code, out


def test_json_apply_status_rollback(env: Env) -> None:
    code, out = run_main(env, "apply", INDEX_K, "--target", str(env.sglang), "--json")
    assert code == 0, out
    assert json.loads(out)["fixes"][0]["outcome"] == "applied"
    assert b"head_dim * 2" in (env.sglang / POOL).read_bytes()
    code, out = run_main(env, "status", "--target", str(env.sglang), "--json")
    assert code == 0
    assert {s["name"]: s["state"] for s in json.loads(out)["status"]["fixes"]}[INDEX_K] == "applied"
    code, out = run_main(env, "rollback", INDEX_K, "--target", str(env.sglang), "--json")
    assert code == 0
    assert git(env.sglang, "status", "--porcelain") == ""


def test_piped_human_output_is_plain_text(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    code, out = run_main(env, "apply", INDEX_K, "--target", str(env.sglang))
    assert code == 0
    assert f"applied {INDEX_K} v2" in out and "\x1b[" not in out
    code, out = run_main(env, "rollback", INDEX_K, "--target", str(env.sglang))
    assert code == 0 and f"rolled-back {INDEX_K}" in out


def test_human_output_draws_with_rich_when_color_is_forced(env: Env,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    code, out = run_main(env, "apply", INDEX_K, "--target", str(env.sglang))
    assert code == 0
    assert f"{INDEX_K} v2" in out and "\x1b[" in out


# -- rendering many files --------------------------------------------------------------------


@pytest.fixture
def wide(env: Env) -> Env:
    """A fix changing 25 files (more than render.FEW_FILES) of the sample checkout."""
    pdir = env.catalog / "patches" / "wide"
    pdir.mkdir()
    for i in range(25):
        (env.sglang / f"gen/w{i:02d}.py").parent.mkdir(exist_ok=True)
        (env.sglang / f"gen/w{i:02d}.py").write_text(f"x = {i}\ny = 0\n")
    env.commit("25 files")
    text = "".join(series.diff_files(f"x = {i}\ny = 0\n".encode(), f"x = {i}\ny = 1\nz = 2\n"
                                     .encode(), f"gen/w{i:02d}.py") for i in range(25))
    (pdir / "0001-wide.patch").write_text(text)
    (env.catalog / "manifests" / "wide.toml").write_text(
        'format = 1\nname = "wide"\nversion = 1\ntitle = "Wide"\nstatus = "active"\n'
        'rationale = "Touches many files."\n[upstream]\nbase_release = "0.5.21"\n'
        '[[patches]]\nfile = "0001-wide.patch"\nroot = "sglang"\n')
    return env


def test_many_files_are_summarized_and_listed_with_verbose(wide: Env, pk: Callable[..., Run]) -> None:
    dry = pk("apply", "--dry-run", "wide", *tgt(wide))
    assert dry.code == 0, dry.err
    assert "25 files changed (25 modified), +50 -25 lines" in dry.out
    assert "gen/w07.py" not in dry.out and "@@" not in dry.out  # no rows, no diff
    verbose = pk("apply", "--dry-run", "-v", "wide", *tgt(wide))
    assert all(f"sglang:gen/w{i:02d}.py" in verbose.out for i in range(25))
    assert "@@" not in verbose.out
    applied = pk("apply", "wide", *tgt(wide))
    assert "applied wide v1" in applied.out and "25 files changed" in applied.out
    assert (wide.sglang / "gen/w24.py").read_text() == "x = 24\ny = 1\nz = 2\n"
    # rollback and undo said "(-v lists them)" and had no -v (a trial); undo said "+0 -0
    # lines" of 25 files: it puts bytes back and draws no diff, so it counts no lines
    for args in (("rollback", "wide"), ("undo",)):
        summary = pk(*args, "--dry-run", *tgt(wide))
        assert summary.code == 0 and "25 files changed (25 modified)" in summary.out, summary.err
        assert "(-v lists them)" in summary.out and "+0 -0" not in summary.out, summary.out
        listed = pk(*args, "--dry-run", "-v", *tgt(wide))
        assert listed.code == 0, listed.err
        assert all(f"sglang:gen/w{i:02d}.py" in listed.out for i in range(25)), listed.out


def test_dry_run_diff_flag_writes_the_whole_diff_plainly(wide: Env, pk: Callable[..., Run]) -> None:
    run = pk("apply", "--dry-run", "--diff", "wide", *tgt(wide))
    assert run.code == 0, run.err
    assert "\x1b[" not in run.out  # not a terminal: no color codes
    for i in range(25):
        assert (f"--- a/gen/w{i:02d}.py\n+++ b/gen/w{i:02d}.py\n@@ -1,2 +1,3 @@\n x = {i}\n"
                "-y = 0\n+y = 1\n+z = 2\n") in run.out
    assert git(wide.sglang, "status", "--porcelain") == ""


def test_a_few_files_still_show_rows_and_diff_by_default(env: Env, pk: Callable[..., Run]) -> None:
    run = pk("apply", "--dry-run", INDEX_K, *tgt(env))
    assert f"M sglang:{POOL}" in run.out
    assert "+    index_k = head_dim * 2\n" in run.out


def test_diff_stat_counts_hunk_lines_not_headers() -> None:
    from patchkit.cli.render import diff_stat

    text = series.diff_files(b"a\nb\n++ x\n", b"a\nc\n+++ y\n--- z\n", "f.txt")
    assert diff_stat(text) == (3, 2)
    assert diff_stat(text + text) == (6, 4)
    assert diff_stat(series.diff_files(None, b"1\n2\n", "n.txt")) == (2, 0)
    assert diff_stat("") == (0, 0)


def test_status_counts_the_drifted_files_beyond_a_few(wide: Env, pk: Callable[..., Run]) -> None:
    assert pk("apply", "wide", *tgt(wide)).code == 0
    for i in range(8):
        (wide.sglang / f"gen/w{i:02d}.py").write_text("edited by hand\n")
    human = pk("status", *tgt(wide))
    row = next(line for line in human.out.splitlines() if line.lstrip().startswith("wide"))
    assert "drifted" in row and "gen/w04.py (drifted)" in row
    assert "gen/w05.py" not in row and "and 3 more (--json lists them)" in row
    data = pk("status", "--json", *tgt(wide)).json()
    [fix] = [f for f in data["status"]["fixes"] if f["name"] == "wide"]
    assert sum(f["state"] == "drifted" for f in fix["files"]) == 8
