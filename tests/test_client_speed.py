"""What keeps the client cheap (issue 7), asserted as behaviour, never as timings.

A run that needs neither git nor rich nor tomlkit does not import them; a fix series and a
large manifest are parsed once per content hash (one cache file per series), and a change to
any byte is seen; a result with many files is summarized unless asked for rows or the diff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

import pytest

from patchkit.catalog import manifest, series
from patchkit.catalog import Catalog
from patchkit.errors import ManifestError
from tests.test_cli import INDEX_K, POOL, Env, Run, env, git, pk, tgt  # noqa: F401  (fixtures)

HEAVY = ("git", "rich", "tomlkit")


def run_counting_imports(env: Env, *args: str,
                         watched: Sequence[str] = HEAVY) -> tuple[int, str, list[str]]:
    """The real ``main()`` in a fresh interpreter; which of the ``watched`` modules it loaded."""
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


def test_json_apply_status_rollback_without_git_features_import_no_git_rich_or_tomlkit(
        env: Env) -> None:
    code, out, heavy = run_counting_imports(env, "apply", INDEX_K, "--target", str(env.sglang),
                                            "--json")
    assert code == 0, out
    assert json.loads(out)["fixes"][0]["outcome"] == "applied"
    assert b"head_dim * 2" in (env.sglang / POOL).read_bytes()
    assert heavy == []
    code, out, heavy = run_counting_imports(env, "status", "--target", str(env.sglang), "--json")
    assert code == 0 and heavy == []
    assert {s["name"]: s["state"] for s in json.loads(out)["status"]["fixes"]}[INDEX_K] == "applied"
    code, out, heavy = run_counting_imports(env, "rollback", INDEX_K, "--target",
                                            str(env.sglang), "--json")
    assert code == 0 and heavy == []
    assert git(env.sglang, "status", "--porcelain") == ""


def test_piped_human_output_is_plain_text_without_rich(env: Env,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    code, out, heavy = run_counting_imports(env, "apply", INDEX_K, "--target", str(env.sglang))
    assert code == 0
    assert f"applied {INDEX_K} v2" in out and "\x1b[" not in out
    assert heavy == []  # stdout is a pipe: the same words, no rich (as git does)
    code, out, heavy = run_counting_imports(env, "rollback", INDEX_K, "--target", str(env.sglang))
    assert code == 0 and f"rolled-back {INDEX_K}" in out and heavy == []


def test_human_output_draws_with_rich_when_color_is_forced(env: Env,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    code, out, heavy = run_counting_imports(env, "apply", INDEX_K, "--target", str(env.sglang))
    assert code == 0
    assert f"{INDEX_K} v2" in out and "\x1b[" in out
    assert "rich" in heavy and "git" not in heavy


# -- the series cache ------------------------------------------------------------------------


def write_series(tmp: Path, count: int, new: str = "new") -> list[tuple[Path, str, bytes]]:
    out = []
    for i in range(count):
        path = tmp / f"{i + 1:04d}-p.patch"
        path.write_text(series.diff_files(b"old\n", f"{new} {i}\n".encode(), f"f{i}.txt"))
        out.append((path, "sglang", path.read_bytes()))
    return out


def cache_entries(kind: str) -> list[Path]:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "patchkit" / kind
    return sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []


@pytest.fixture
def fresh_process_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A new user cache and no in-process entries: as if a new run started."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(series, "_cache", {})


def test_a_series_is_one_cache_entry_read_back_as_fresh_copies(
        tmp_path: Path, fresh_process_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
    patches = write_series(tmp_path, 5)
    digests, files = series.parse_series(patches)
    assert [f["path"] for f in files] == [f"f{i}.txt" for i in range(5)]
    assert [f["patch"] for f in files] == [p.name for p, _r, _d in patches]
    assert len(digests) == 5 and len(set(digests)) == 5
    entries = [p for p in cache_entries("plans") if p.name.startswith("series-")]
    assert len(entries) == 1
    assert [p for p in cache_entries("plans") if not p.name.startswith("series-")] == []

    # A new process reads the one entry (the parser is not called) and may mutate its copy.
    monkeypatch.setattr(series, "_cache", {})
    monkeypatch.setattr(series, "_parse", lambda *a: pytest.fail("parsed despite the cache"))
    again = series.parse_series([(p, "other", d) for p, _r, d in patches])[1]
    assert [f["root"] for f in again] == ["other"] * 5
    again[0]["hunks"][0]["body"] = ""
    third = series.parse_series(patches)[1]
    assert third[0]["hunks"][0]["body"] == "-old\n+new 0\n"


def test_a_changed_or_reordered_patch_is_never_served_from_the_cache(
        tmp_path: Path, fresh_process_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
    patches = write_series(tmp_path, 3)
    series.parse_series(patches)
    monkeypatch.setattr(series, "_cache", {})
    changed = write_series(tmp_path, 3, new="changed")
    files = series.parse_series(changed)[1]
    assert [f["hunks"][0]["body"] for f in files] == [f"-old\n+changed {i}\n" for i in range(3)]
    swapped = series.parse_series([changed[2], changed[0]])[1]
    assert [f["path"] for f in swapped] == ["f2.txt", "f0.txt"]


def test_a_damaged_series_entry_is_parsed_again(tmp_path: Path, fresh_process_cache: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    patches = write_series(tmp_path, 2)
    expected = series.parse_series(patches)[1]
    [entry] = [p for p in cache_entries("plans") if p.name.startswith("series-")]
    entry.write_bytes(b"\x00not marshal")
    monkeypatch.setattr(series, "_cache", {})
    assert series.parse_series(patches)[1] == expected


# -- the manifest parse cache ----------------------------------------------------------------


def big_manifest(catalog: Path, name: str, patches: int = 400) -> Path:
    """A valid manifest over CACHE_MIN_CHARS: many patches (like a release drift)."""
    pdir = catalog / "patches" / name
    pdir.mkdir(parents=True)
    lines = [f'format = 1\nname = "{name}"\nversion = 2\ntitle = "Drift"\nstatus = "active"\n'
             'rationale = "The release drift."\n\n[upstream]\nbase_release = "0.5.22"\n']
    for i in range(patches):
        file = f"{i + 1:04d}-f{i}.patch"
        (pdir / file).write_text(series.diff_files(b"a\n", b"b\n", f"f{i}.txt"))
        lines.append(f'[[patches]]\nfile = "{file}"\nroot = "sglang"\n')
    lines.append('[[changelog]]\nversion = 1\ndate = 2026-11-20\nsummary = "First."\n'
                 '[[changelog]]\nversion = 2\ndate = "2026-11-21"\nsummary = "Second."\n')
    path = catalog / "manifests" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    assert len(path.read_text()) >= manifest.CACHE_MIN_CHARS
    return path


def test_a_large_manifest_is_parsed_once_and_reloads_equal(
        tmp_path: Path, fresh_process_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
    path = big_manifest(tmp_path / "cat", "drift")
    first = manifest.load_manifest(path)
    assert len(cache_entries("manifests")) == 1
    assert [c.date for c in first.changelog] == ["2026-11-20", "2026-11-21"]  # a TOML date kept
    monkeypatch.setattr(manifest, "_tomllib", None)  # a parse now would need tomlkit ...
    monkeypatch.setattr(manifest, "_parse_toml", lambda *a: pytest.fail("parsed despite cache"))
    assert manifest.load_manifest(path) == first  # ... but the cached parse is read


def test_an_edited_large_manifest_is_seen_and_still_validated(
        tmp_path: Path, fresh_process_cache: None) -> None:
    path = big_manifest(tmp_path / "cat", "drift")
    manifest.load_manifest(path)
    path.write_text(path.read_text().replace("version = 2\n", "version = 3\n", 1))
    with pytest.raises(ManifestError, match="newest changelog entry is for version 2"):
        manifest.load_manifest(path)
    path.write_text(path.read_text().replace("version = 3\n", "version = 2\n", 1)
                    .replace('title = "Drift"', 'title = "Drift, edited"'))
    assert manifest.load_manifest(path).title == "Drift, edited"


def test_a_malformed_large_manifest_names_the_line(tmp_path: Path, fresh_process_cache: None) -> None:
    path = big_manifest(tmp_path / "cat", "drift")
    text = path.read_text().splitlines(keepends=True)
    text[300] = 'file = "unterminated\n'
    path.write_text("".join(text))
    with pytest.raises(ManifestError) as info:
        manifest.load_manifest(path)
    assert info.value.details["line"] == 301
    assert f"{path}:301:" in info.value.message and "not valid TOML" in info.value.message
    assert cache_entries("manifests") == []  # only valid parses are kept


def test_a_damaged_manifest_entry_is_parsed_again(tmp_path: Path, fresh_process_cache: None) -> None:
    path = big_manifest(tmp_path / "cat", "drift")
    first = manifest.load_manifest(path)
    [entry] = cache_entries("manifests")
    entry.write_bytes(b"garbage")
    assert manifest.load_manifest(path) == first


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


def test_catalog_status_request_reads_each_series_once(env: Env, fresh_process_cache: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """status sends every fix; a repeat run parses nothing and writes one entry per series."""
    from patchkit import plan

    catalog = Catalog(env.catalog)
    fixes = catalog.all()
    first = plan.build_request(catalog, fixes, op="status", roots={"sglang": str(env.sglang)},
                               state_root="sglang", python=None)
    assert len([p for p in cache_entries("plans") if p.name.startswith("series-")]) == len(
        {tuple(ref.path.read_bytes() for ref in f.patches) for f in fixes})
    monkeypatch.setattr(series, "_cache", {})
    monkeypatch.setattr(series, "_parse", lambda *a: pytest.fail("parsed despite the cache"))
    again = plan.build_request(Catalog(env.catalog), Catalog(env.catalog).all(), op="status",
                               roots={"sglang": str(env.sglang)}, state_root="sglang",
                               python=None)
    assert again == first


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


def test_without_tomllib_tomlkit_reads_the_same_fix(tmp_path: Path, fresh_process_cache: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.10 has no tomllib: every read goes through tomlkit, with the same result."""
    path = big_manifest(tmp_path / "cat", "drift")
    fast = manifest.load_manifest(path)
    monkeypatch.setattr(manifest, "_tomllib", None)
    monkeypatch.setattr(manifest, "_stamp", None)  # the tomlkit parser has a cache of its own
    assert manifest.load_manifest(path) == fast
    assert len({p.parent.name for p in cache_entries("manifests")}) == 2
