"""`patchkit log`: the lineage of the fixes, as a tree and as JSON.

The shipped catalog's log (without the git history, whose shas change with every clone) is
compared with the expected files in ``tests/samples/log/``. The git-history enrichment is
tested on a catalog repository built here commit by commit, the applied version on a real
local target, and ``log FIX`` on the shipped catalog.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from patchkit import api
from patchkit.catalog import lineage
from patchkit.cli import render_history as render
from patchkit.catalog import Catalog
from patchkit.cli.main import cli, main
from patchkit.errors import EXIT_USAGE, ManifestError
from patchkit.results import OpResult
from patchkit.targets import LocalTarget

REPO = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).parent / "samples"
SEED_ORDER = ("dsv4-bf16-index-k", "hicache-index-k-sync", "revert-hicache-index-k-sync",
              "dsv4-bf16-sizing", "prefill-hicache-off")


def git(cwd: Path, *args: str, date: str | None = None) -> str:
    env = None
    if date is not None:
        env = dict(os.environ, GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def plain(lin: lineage.Lineage, width: int = 1000) -> str:
    """The tree as rich draws it on a terminal wide enough to fold nothing: what the command
    writes to a pipe without rich, at any width."""
    console = Console(width=width, file=io.StringIO(), color_system=None, highlight=False)
    render.render_log(console, lin)
    return console.file.getvalue()  # type: ignore[attr-defined]


def log_cli(*args: str, catalog: Path = REPO, columns: int = 100) -> Any:
    result = CliRunner().invoke(cli, ["--catalog", str(catalog), "log", *args],
                                env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result


# -- the shipped catalog -----------------------------------------------------------------------


def test_shipped_lineage_is_the_seed_story_in_order() -> None:
    lin = lineage.build(Catalog(REPO), history=False)
    assert lin.order == SEED_ORDER
    assert [(e.source, e.kind, e.target) for e in lin.edges] == [
        ("hicache-index-k-sync", "depends_on", "dsv4-bf16-index-k"),
        ("revert-hicache-index-k-sync", "reverts", "hicache-index-k-sync"),
        ("dsv4-bf16-sizing", "depends_on", "dsv4-bf16-index-k"),
    ]
    dead = lin.get("hicache-index-k-sync")
    assert dead.status == "dead"
    assert dead.links.reverted_by == ("revert-hicache-index-k-sync",)
    assert dead.replaced_by == ("revert-hicache-index-k-sync",)
    assert lin.get("dsv4-bf16-index-k").links.depended_on_by == (
        "hicache-index-k-sync", "dsv4-bf16-sizing")
    assert all(not v.commits for f in lin.fixes for v in f.versions)


def regenerate_samples() -> None:
    """``PATCHKIT_REGEN_SAMPLES=1``: rewrite the expected files after a deliberate change to
    the shipped manifests (then review the diff before committing it)."""
    if os.environ.get("PATCHKIT_REGEN_SAMPLES"):
        lin = lineage.build(Catalog(REPO), history=False)
        (SAMPLES / "log" / "shipped.txt").write_text(plain(lin))
        (SAMPLES / "log" / "shipped.json").write_text(
            json.dumps(lin.to_json(), indent=2, sort_keys=True) + "\n")


def test_shipped_log_matches_the_expected_text() -> None:
    regenerate_samples()
    expected = (SAMPLES / "log" / "shipped.txt").read_text()
    assert plain(lineage.build(Catalog(REPO), history=False)) == expected
    assert log_cli("--no-history").output == expected  # piped: plain, never folded
    assert log_cli("--no-history", columns=40).output == expected


def test_shipped_log_json_matches_the_expected_file() -> None:
    regenerate_samples()
    expected = json.loads((SAMPLES / "log" / "shipped.json").read_text())
    data = json.loads(log_cli("--no-history", "--json").output)
    assert data == {"ok": True, "op": "log", **expected}  # the library's lineage, the CLI's ok and op
    assert data["order"] == list(SEED_ORDER) and data["history"] is False


def test_log_fix_shows_that_fix_and_its_linked_fixes() -> None:
    dead = json.loads(log_cli("hicache-index-k-sync", "--no-history", "--json").output)
    assert dead["focus"] == "hicache-index-k-sync"
    assert dead["order"] == ["dsv4-bf16-index-k", "hicache-index-k-sync",
                             "revert-hicache-index-k-sync"]
    assert {(e["from"], e["to"]) for e in dead["edges"]} == {
        ("hicache-index-k-sync", "dsv4-bf16-index-k"),
        ("revert-hicache-index-k-sync", "hicache-index-k-sync")}

    sizing = log_cli("dsv4-bf16-sizing", "--no-history").output
    assert sizing.splitlines()[0] == "lineage: 2 fixes linked to dsv4-bf16-sizing, oldest first"
    assert "dsv4-bf16-index-k  v4" in sizing and "hicache-index-k-sync  v4" not in sizing
    # both versions of the rebased fix: the first on 0.5.21, the rebase onto 0.5.23
    assert "v1  2026-11-18  on 0.5.21\n" in sizing
    assert "v2  2026-11-29  on 0.5.23  (rebased from 0.5.21)\n" in sizing

    alone = json.loads(log_cli("prefill-hicache-off", "--no-history", "--json").output)
    assert alone["order"] == ["prefill-hicache-off"] and alone["edges"] == []


def test_log_of_an_unknown_fix_is_a_usage_error_naming_close_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--catalog", str(REPO), "log", "hicache-index-k-snyc"])
    assert exc.value.code == EXIT_USAGE
    assert "hicache-index-k-sync" in capsys.readouterr().err


# -- ordering rules on small catalogs ----------------------------------------------------------


def write_fix(catalog: Path, name: str, *, date: str | None, extra: str = "",
              status: str = "active") -> None:
    (catalog / "patches" / name).mkdir(parents=True, exist_ok=True)
    (catalog / "patches" / name / "0001-x.patch").write_text(
        f"--- a/{name}.txt\n+++ b/{name}.txt\n@@ -1 +1 @@\n-a\n+b\n")
    changelog = (f'\n[[changelog]]\nversion = 1\ndate = "{date}"\nbase_release = "0.5.21"\n'
                 f'summary = "{name} first version"\n') if date else ""
    (catalog / "manifests").mkdir(parents=True, exist_ok=True)
    (catalog / "manifests" / f"{name}.toml").write_text(
        f'format = 1\nname = "{name}"\nversion = 1\ntitle = "{name} title"\n'
        f'status = "{status}"\nrationale = "why {name}"\n{extra}\n'
        f'[upstream]\nbase_release = "0.5.21"\n\n[[patches]]\nfile = "0001-x.patch"\n'
        f'{changelog}')


def test_links_order_before_dates_and_names_break_ties(tmp_path: Path) -> None:
    write_fix(tmp_path, "written-late", date="2026-03-01")
    write_fix(tmp_path, "needs-late", date="2026-01-01", extra='depends_on = ["written-late"]')
    write_fix(tmp_path, "b-same-day", date="2026-02-01")
    write_fix(tmp_path, "a-same-day", date="2026-02-01")
    write_fix(tmp_path, "undated", date=None)
    lin = lineage.build(Catalog(tmp_path), history=False)
    # needs-late is the oldest by date but comes after what it depends on
    assert lin.order == ("a-same-day", "b-same-day", "written-late", "needs-late", "undated")
    assert lin.get("undated").versions[0].date == ""
    assert "undated  undated  v1  active" in plain(lin)


def test_a_cycle_through_supersedes_and_reverts_names_the_manifests(tmp_path: Path) -> None:
    write_fix(tmp_path, "one", date="2026-01-01", extra='supersedes = ["two"]')
    write_fix(tmp_path, "two", date="2026-01-02", extra='reverts = "one"')
    write_fix(tmp_path, "three", date="2026-01-03")
    with pytest.raises(ManifestError) as exc:
        lineage.build(Catalog(tmp_path), history=False)
    assert "one, two" in exc.value.message
    assert str(tmp_path / "manifests" / "one.toml") in exc.value.message


def test_superseded_fix_names_what_replaced_it() -> None:
    lin = lineage.build(Catalog(SAMPLES / "catalog"), history=False)
    assert lin.order == ("index-k-bytes", "old-index-k", "pool-guard")
    old = lin.get("old-index-k")
    assert old.links.superseded_by == ("pool-guard",) and old.replaced_by == ("pool-guard",)
    text = plain(lin)
    assert "superseded: replaced by pool-guard" in text
    assert "superseded by pool-guard" in text and "supersedes old-index-k" in text


def test_a_fix_marked_upstream_says_since_which_release(tmp_path: Path) -> None:
    """A fix marked upstream since R (``upstream check --mark``) showed ``upstream 0.5.21``, its
    base release, which reads as the release that took it (a new-user trial): the log says
    ``in upstream since R`` as ``status`` does, and carries ``upstream_since``."""
    from patchkit.catalog import edit

    write_fix(tmp_path, "taken", date="2026-01-01")
    write_fix(tmp_path, "kept", date="2026-01-02")
    edit.set_upstream(tmp_path / "manifests" / "taken.toml", "0.5.23")
    lin = lineage.build(Catalog(tmp_path), history=False)
    assert (lin.get("taken").upstream_since, lin.get("kept").upstream_since) == ("0.5.23", "")
    text = plain(lin)
    # "forwarding:" names the field: a bare "not-forwarded" beside the mark read as a
    # contradiction, and "upstream 0.5.21" as the release upstream has it in (trials)
    assert "in upstream since 0.5.23 (based on 0.5.21; forwarding: not-forwarded)\n" in text, text
    assert "based on 0.5.21; forwarding: not-forwarded\n" in text  # the fix not marked
    assert "upstream 0.5.21" not in text
    data = json.loads(log_cli("--no-history", "--json", catalog=tmp_path).output)
    assert [f["upstream_since"] for f in data["fixes"]] == ["0.5.23", ""]


# -- git history of the catalog ----------------------------------------------------------------


def test_versions_carry_the_catalog_commits_and_rebases(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    catalog = repo / "catalog"  # the catalog is a subdirectory of its repository
    catalog.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "README").write_text("not the catalog\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "README", date="2026-01-01T09:00:00+00:00")

    src = SAMPLES / "catalog"
    shutil.copytree(src / "patches" / "index-k-bytes", catalog / "patches" / "index-k-bytes")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "index-k-bytes: the series", date="2026-01-09T10:00:00+00:00")

    v2 = (src / "manifests" / "index-k-bytes.toml").read_text()
    v1 = v2.replace("version = 2\n", "version = 1\n", 1)
    v1 = v1[:v1.rindex("[[changelog]]")].replace('base_release = "0.5.21"\nreleases = ["0.5.20", "0.5.21"]',
                                                  'base_release = "0.5.20"\nreleases = ["0.5.20"]')
    (catalog / "manifests").mkdir()
    (catalog / "manifests" / "index-k-bytes.toml").write_text(v1)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "index-k-bytes v1", date="2026-01-10T10:00:00+00:00")

    for name in ("old-index-k", "pool-guard"):
        shutil.copytree(src / "patches" / name, catalog / "patches" / name)
        shutil.copy(src / "manifests" / f"{name}.toml", catalog / "manifests")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pool-guard replaces old-index-k", date="2026-01-20T10:00:00+00:00")

    (catalog / "manifests" / "index-k-bytes.toml").write_text(v2)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "index-k-bytes v2: rebase on 0.5.21", date="2026-02-01T10:00:00+00:00")
    rebase_sha = git(repo, "rev-parse", "HEAD")
    (catalog / "manifests" / "index-k-bytes.toml").write_text(v2 + "\n# uncommitted\n")

    lin = lineage.build(Catalog(catalog))
    assert lin.history is True
    v1_entry, v2_entry = lin.get("index-k-bytes").versions
    assert [c.subject for c in v1_entry.commits] == ["index-k-bytes: the series", "index-k-bytes v1"]
    assert v1_entry.base_release == "0.5.20" and not v1_entry.is_rebase
    assert [c.subject for c in v2_entry.commits] == ["index-k-bytes v2: rebase on 0.5.21"]
    assert v2_entry.commits[0].sha == rebase_sha
    assert v2_entry.commits[0].date == "2026-02-01T10:00:00+00:00"
    assert v2_entry.is_rebase and v2_entry.rebased_from == "0.5.20"
    assert v2_entry.base_release == "0.5.21"
    for name in ("old-index-k", "pool-guard"):
        assert [c.subject for f in [lin.get(name)] for v in f.versions for c in v.commits] == [
            "pool-guard replaces old-index-k"]

    text = log_cli(catalog=catalog).output
    assert "v2  2026-02-01  on 0.5.21  (rebased from 0.5.20)" in text
    assert f"{rebase_sha[:12]}  2026-02-01  index-k-bytes v2: rebase on 0.5.21" in text
    assert "README" not in text

    data = json.loads(log_cli("index-k-bytes", "--json", catalog=catalog).output)
    versions = data["fixes"][0]["versions"]
    assert data["history"] is True
    assert versions[1]["rebased_from"] == "0.5.20"
    assert versions[1]["commits"] == [{"sha": rebase_sha, "date": "2026-02-01T10:00:00+00:00",
                                       "subject": "index-k-bytes v2: rebase on 0.5.21"}]

    assert rebase_sha[:12] not in log_cli("--no-history", catalog=catalog).output


def test_a_version_is_a_rebase_from_what_it_came_from_not_from_the_version_before(
        tmp_path: Path) -> None:
    """With variants, versions are no chain: v3, a refresh of the 0.5.22 variant (v1) after
    v2 moved to 0.5.23, was shown `(rebased from 0.5.23)`, and a backport's new variant was
    said rebased from the previous version's base, not the one it started from. A version on
    a base an earlier version had is no rebase; one whose changelog says `Rebased from A onto
    B` (what rebase writes) was rebased from A."""
    cat = tmp_path / "cat"
    for folder in ("", "0.5.22", "0.5.21"):
        (cat / "patches" / "sw" / folder).mkdir(parents=True, exist_ok=True)
        (cat / "patches" / "sw" / folder / "0001-sw.patch").write_text(
            "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    (cat / "manifests").mkdir()
    entries = [(1, "0.5.22", "First version."),
               (2, "0.5.23", "Rebased from 0.5.22 onto 0.5.23: 0001-sw.patch offset."),
               (3, "0.5.22", "bug fixed in the 0.5.22 series"),
               (4, "0.5.21", "Rebased from 0.5.22 onto 0.5.21: 0001-sw.patch offset. A variant "
                             "for 0.5.21; the newer releases keep theirs.")]
    (cat / "manifests" / "sw.toml").write_text(
        'format = 1\nname = "sw"\nversion = 2\ntitle = "a switch"\nstatus = "active"\n'
        'rationale = "why"\n\n[upstream]\nbase_release = "0.5.23"\nreleases = ["0.5.23"]\n\n'
        '[[patches]]\nfile = "0001-sw.patch"\n\n'
        + "".join(f'[[changelog]]\nversion = {v}\ndate = "2026-12-0{v}"\nbase_release = "{b}"\n'
                  f'summary = "{t}"\n\n' for v, b, t in entries)
        + "".join(f'[[variants]]\nversion = {v}\nbase_release = "{b}"\nreleases = ["{b}"]\n\n'
                  '[[variants.patches]]\nfile = "0001-sw.patch"\n\n' for v, b, _t in entries[2:]))
    versions = lineage.build(Catalog(cat)).get("sw").versions
    assert [(v.version, v.rebased_from) for v in versions] == [
        (1, ""), (2, "0.5.22"), (3, ""), (4, "0.5.22")]
    # a version that is in none of them names the newest, a variant's (it said "up to 2")
    from patchkit.rebase.versions import series_of_version

    subprocess.run(["git", "init", "-q", str(cat)], check=True)
    subprocess.run(["git", "-C", str(cat), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(cat), "-c", "user.name=t", "-c", "user.email=t@t", "commit",
                    "-q", "-m", "sw"], check=True)
    with pytest.raises(Exception, match=r"versions run up to 4\)"):
        series_of_version(Catalog(cat), "sw", 9)


def test_a_catalog_outside_git_has_no_history(tmp_path: Path) -> None:
    shutil.copytree(SAMPLES / "catalog", tmp_path / "catalog")
    lin = lineage.build(Catalog(tmp_path / "catalog"))
    assert lin.history is False
    assert "no catalog commit" not in plain(lin)


# -- the applied version on a target -----------------------------------------------------------


def test_target_shows_which_version_is_applied_and_since_when(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(SAMPLES / "catalog", catalog)
    sglang = tmp_path / "sglang"
    shutil.copytree(SAMPLES / "tree" / "sglang", sglang)
    (sglang / "python/sglang/version.py").unlink()
    (sglang / "python/sglang/_version.py").write_text("__version__ = version = '0.5.21'\n")
    git(sglang, "init", "-q")
    git(sglang, "add", "-A")
    git(sglang, "commit", "-q", "-m", "SGLang 0.5.21")
    target = LocalTarget(roots={"sglang": str(sglang)}, description=str(sglang))
    api.apply(Catalog(catalog), target, ["index-k-bytes"])

    data = json.loads(log_cli("--target", str(sglang), "--json", catalog=catalog).output)
    fixes = {f["name"]: f for f in data["fixes"]}
    applied = fixes["index-k-bytes"]["applied"]
    assert applied["state"] == "applied" and applied["version"] == 2
    assert applied["applied_at"].endswith("Z")
    assert data["target"] == f"sglang={sglang}"
    assert fixes["pool-guard"]["applied"] is None  # needs a serve root the target lacks

    text = log_cli("--target", str(sglang), "--no-history", catalog=catalog, columns=200).output
    lines = text.splitlines()
    assert lines[0] == f"lineage: 3 fixes, oldest first; applied on sglang={sglang}"
    head = next(line for line in lines if "index-k-bytes  v2  active" in line)
    assert f"[applied v2 since {applied['applied_at']} on target]" in head
    assert any("v2  2026-02-01  on 0.5.21  (rebased from 0.5.20)  <- applied on target" in line
               for line in lines)
    v1 = next(line for line in lines if "v1  2026-01-10  on 0.5.20" in line)
    assert "on target" not in v1

    with_serve = json.loads(log_cli("--target", str(sglang), "--root", f"serve={tmp_path}",
                                    "--json", "--no-history", catalog=catalog).output)
    guard = {f["name"]: f for f in with_serve["fixes"]}["pool-guard"]
    assert guard["applied"]["state"] == "not-applied"


def test_a_fix_applied_as_a_commit_names_the_commit() -> None:
    """A status whose record carries the commits ``apply --commit`` made (docs/state.md)."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    raw = {"format": 1, "op": "status", "ok": True, "dry_run": False, "fixes": [], "recovered": [],
           "error": None,
           "status": {"state_root": "/srv/sglang", "journal": None, "fixes": [
               {"name": "index-k-bytes", "state": "applied", "version": 2,
                "applied_at": "2026-02-02T10:00:00Z", "files": [],
                "commits": [{"root": "sglang", "sha": sha}]},
               {"name": "old-index-k", "state": "not-applied", "version": 1, "applied_at": None,
                "files": []}]}}
    status = OpResult.from_engine(raw, "sglang=/srv/sglang")
    lin = lineage.build(Catalog(SAMPLES / "catalog"), target_status=status, history=False)
    assert lin.get("index-k-bytes").applied.commits == (("sglang", sha),)
    assert lin.get("index-k-bytes").to_json()["applied"]["commits"] == [{"root": "sglang", "sha": sha}]
    assert lin.get("pool-guard").applied is None
    text = plain(lin, width=200)
    assert f"[applied v2 since 2026-02-02T10:00:00Z, commit sglang@{sha[:12]} on target]" in text
    assert "old-index-k  v1  superseded\n" in text  # not applied: no mark
    # lost (or not needed, or drifted) since some later move nobody recorded: the time is the
    # apply's, and said as that (a trial read "lost v3 since T" as the time of the upgrade)
    for state in ("lost", "not-needed", "drifted"):
        raw["status"]["fixes"][0].update(state=state, commits=[])  # type: ignore[index]
        status = OpResult.from_engine(raw, "sglang=/srv/sglang")
        text = plain(lineage.build(Catalog(SAMPLES / "catalog"), target_status=status,
                                   history=False), width=200)
        version = "" if state == "not-needed" else " v2"  # a release holds it: no version there
        assert f"[{state}{version}, applied 2026-02-02T10:00:00Z on target]" in text, text


def test_a_lineage_of_loaded_fixes_draws_the_log_tree() -> None:
    """A lineage built from loaded fixes and states by name draws the same tree."""
    catalog = Catalog(REPO)
    console = Console(width=1000, file=io.StringIO(), color_system=None, highlight=False)
    render.render_log(console, lineage.from_fixes(reversed(catalog.all()),
                                                  states={"dsv4-bf16-sizing": "applied"}))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    expected = (SAMPLES / "log" / "shipped.txt").read_text()
    assert text == expected.replace("dsv4-bf16-sizing  v4  active\n",
                                    "dsv4-bf16-sizing  v4  active  [applied on target]\n")
    assert text != expected


def test_a_fix_present_but_unrecorded_has_no_applied_version(tmp_path: Path) -> None:
    sglang = tmp_path / "sglang"
    shutil.copytree(SAMPLES / "tree" / "sglang", sglang)
    (sglang / "python/sglang/version.py").unlink()
    (sglang / "python/sglang/_version.py").write_text("__version__ = version = '0.5.21'\n")
    pool = sglang / "python/sglang/srt/pool.py"
    pool.write_text(pool.read_text().replace(  # the fix's change, made by hand
        "    index_k = head_dim\n",
        "    # The bf16 index-K cache stores two bytes per element.\n    index_k = head_dim * 2\n"))
    data = json.loads(log_cli("--target", str(sglang), "--json", "--no-history",
                              catalog=SAMPLES / "catalog").output)
    applied = {f["name"]: f["applied"] for f in data["fixes"]}["index-k-bytes"]
    assert applied == {"state": "present-unrecorded", "version": None, "applied_at": None,
                       "commits": []}
    text = log_cli("--target", str(sglang), "--no-history", catalog=SAMPLES / "catalog",
                   columns=200).output
    assert "index-k-bytes  v2  active  [present-unrecorded on target]" in text
    assert "<- " not in text


def test_a_variant_carries_the_commits_that_wrote_its_series(tmp_path: Path) -> None:
    """A commit that adds a variant (``patches/FIX/DIR/``) belongs to the variant's version,
    not to the top level's, which it left as it was. Before, the variant said "no catalog
    commit" (a new-user trial: every shipped fix's 0.5.22 variant), and then the top level
    listed the commit too (another)."""
    repo = tmp_path / "catalog"
    src = SAMPLES / "catalog"
    shutil.copytree(src / "patches" / "index-k-bytes", repo / "patches" / "index-k-bytes")
    (repo / "manifests").mkdir()
    text = (src / "manifests" / "index-k-bytes.toml").read_text()
    (repo / "manifests" / "index-k-bytes.toml").write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "index-k-bytes v2", date="2026-01-10T10:00:00+00:00")

    variant = repo / "patches" / "index-k-bytes" / "0.5.19"
    variant.mkdir()
    for patch in (src / "patches" / "index-k-bytes").glob("*.patch"):
        shutil.copy(patch, variant / patch.name)
    (repo / "manifests" / "index-k-bytes.toml").write_text(
        text + '\n[[variants]]\nversion = 1\nbase_release = "0.5.19"\nreleases = ["0.5.19"]\n'
          'dir = "0.5.19"\n\n[[variants.patches]]\nfile = "0001-count-index-k-bytes.patch"\n'
          'root = "sglang"\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "index-k-bytes: a variant for 0.5.19",
        date="2026-01-20T10:00:00+00:00")

    lin = lineage.build(Catalog(repo))
    versions = {v.version: [c.subject for c in v.commits] for v in lin.get("index-k-bytes").versions}
    assert versions[1] == ["index-k-bytes: a variant for 0.5.19"], versions
    assert versions[2] == ["index-k-bytes v2"], versions


def test_a_refreshed_variants_older_version_keeps_its_series_and_its_commits(tmp_path: Path) -> None:
    """A variant's v1 (0.5.22) refreshed as v3 in the same folder: `diff --versions 1 3` said
    there was no version 1 in the history (only top-level versions were looked for), and
    `log` credited the commit that made v1 to v3 (the folder was read as today's variant)."""
    from patchkit.rebase.versions import series_of_version

    cat = tmp_path / "cat"
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+{}\n"
    for folder in ("", "0.5.22"):
        (cat / "patches" / "sw" / folder).mkdir(parents=True, exist_ok=True)
        (cat / "patches" / "sw" / folder / "0001-sw.patch").write_text(patch.format(folder or "top"))
    (cat / "manifests").mkdir()
    head = ('format = 1\nname = "sw"\nversion = 2\ntitle = "a switch"\nstatus = "active"\n'
            'rationale = "why"\n\n[upstream]\nbase_release = "0.5.23"\nreleases = ["0.5.23"]\n\n'
            '[[patches]]\nfile = "0001-sw.patch"\n\n')
    log = [(1, "0.5.22", "First version."), (2, "0.5.23", "Rebased from 0.5.22 onto 0.5.23.")]

    def manifest(variant: int) -> str:
        return head + "".join(f'[[changelog]]\nversion = {v}\ndate = "2026-12-0{v}"\n'
                              f'base_release = "{b}"\nsummary = "{t}"\n\n' for v, b, t in log) + (
            f'[[variants]]\nversion = {variant}\nbase_release = "0.5.22"\nreleases = ["0.5.22"]\n\n'
            '[[variants.patches]]\nfile = "0001-sw.patch"\n')

    def commit(message: str) -> str:
        subprocess.run(["git", "-C", str(cat), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(cat), "-c", "user.name=t", "-c", "user.email=t@t", "commit",
                        "-q", "-m", message], check=True)
        return subprocess.run(["git", "-C", str(cat), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()

    (cat / "manifests" / "sw.toml").write_text(manifest(1))
    subprocess.run(["git", "init", "-q", str(cat)], check=True)
    first = commit("sw v2, v1 kept for 0.5.22")
    (cat / "patches" / "sw" / "0.5.22" / "0001-sw.patch").write_text(patch.format("fixed"))
    log.append((3, "0.5.22", "bug fixed in the 0.5.22 series"))
    (cat / "manifests" / "sw.toml").write_text(manifest(3).replace("version = 2\n", "version = 2\n", 1))
    second = commit("sw v3: bug fixed in the 0.5.22 series")
    assert series_of_version(Catalog(cat), "sw", 1) == {"0001-sw.patch": patch.format("0.5.22")}
    assert series_of_version(Catalog(cat), "sw", 3) == {"0001-sw.patch": patch.format("fixed")}
    versions = {v.version: [c.sha for c in v.commits] for v in lineage.build(Catalog(cat)).get("sw").versions}
    assert first in versions[1] and first not in versions[3], versions
    assert versions[3] == [second], versions


def test_each_commit_is_credited_to_the_version_it_made(tmp_path: Path) -> None:
    """A backport's new variant, a variant's refresh and a variant extended to a release are
    commits of those versions alone: `log` listed each under the top level's version too,
    as if the 0.5.23 series had changed (a new-user trial). A commit changing the top level
    (its rationale) is the top level's; one that made the top level and kept the old series
    as a variant is both versions'."""
    from patchkit.catalog import edit

    cat = tmp_path / "cat"
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+{}\n"
    (cat / "patches" / "sw").mkdir(parents=True)
    (cat / "patches" / "sw" / "0001-sw.patch").write_text(patch.format("0.5.22"))
    (cat / "manifests").mkdir()
    path = cat / "manifests" / "sw.toml"
    path.write_text(edit.new_manifest_text("sw", "a switch", "0.5.22", [("0001-sw.patch", "sglang")],
                                           "why", date="2026-12-01"))
    git(cat, "init", "-q")

    def commit(message: str) -> str:
        git(cat, "add", "-A")
        git(cat, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
        return git(cat, "rev-parse", "HEAD")

    first = commit("sw v1")
    (cat / "patches" / "sw" / "0.5.22").mkdir()
    shutil.copy(cat / "patches" / "sw" / "0001-sw.patch", cat / "patches" / "sw" / "0.5.22")
    (cat / "patches" / "sw" / "0001-sw.patch").write_text(patch.format("0.5.23"))
    edit.bump_manifest(path, version=2, changelog_summary="Rebased from 0.5.22 onto 0.5.23.",
                       date="2026-12-02", base_release="0.5.23", keep_as="0.5.22")
    rebased = commit("sw v2: rebased onto 0.5.23, v1 kept for 0.5.22")
    (cat / "patches" / "sw" / "0.5.21").mkdir()
    (cat / "patches" / "sw" / "0.5.21" / "0001-sw.patch").write_text(patch.format("0.5.21"))
    edit.add_variant(path, version=3, base_release="0.5.21", variant_dir="0.5.21",
                     patches=[("0001-sw.patch", "sglang")], date="2026-12-03",
                     changelog_summary="Rebased from 0.5.22 onto 0.5.21: a variant for 0.5.21.")
    backport = commit("sw v3: a variant for 0.5.21")
    (cat / "patches" / "sw" / "0.5.22" / "0001-sw.patch").write_text(patch.format("fixed"))
    edit.bump_variant(path, "0.5.22", version=4, changelog_summary="bug fixed in the 0.5.22 series",
                      date="2026-12-04")
    refresh = commit("sw v4: bug fixed in the 0.5.22 series")
    edit.add_variant_release(path, "0.5.21", "0.5.20")
    extended = commit("sw v3 applies to 0.5.20 too")
    path.write_text(path.read_text().replace('rationale = """why', 'rationale = """why, said better'))
    reworded = commit("sw: the rationale reworded")

    versions = {v.version: [c.sha for c in v.commits] for v in lineage.build(Catalog(cat)).get("sw").versions}
    assert versions == {1: [first, rebased], 2: [rebased, reworded], 3: [backport, extended],
                        4: [refresh]}, versions


def test_log_and_diff_versions_follow_a_fix_renamed_by_hand(tmp_path: Path) -> None:
    """A fix renamed by hand (git mv of its manifest and series, `name` edited): `log` showed
    its v1 made by the rename commit, dropping the commits that made and changed it, and
    `diff --versions` found no older version (a trial). Both follow the rename through the
    catalog's history, as `git log --follow` does."""
    repo = tmp_path / "catalog"
    src = SAMPLES / "catalog"
    shutil.copytree(src / "patches" / "index-k-bytes", repo / "patches" / "old-name")
    (repo / "manifests").mkdir()
    v2 = (src / "manifests" / "index-k-bytes.toml").read_text().replace(
        'name = "index-k-bytes"', 'name = "old-name"')
    v1 = v2.replace("version = 2\n", "version = 1\n", 1)
    v1 = v1[:v1.rindex("[[changelog]]")]
    (repo / "manifests" / "old-name.toml").write_text(v1)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "old-name v1", date="2026-01-10T10:00:00+00:00")
    patch = next((repo / "patches" / "old-name").glob("*.patch"))
    (repo / "manifests" / "old-name.toml").write_text(v2)
    patch.write_text(patch.read_text() + "\n")  # a changed series for v2
    git(repo, "commit", "-qam", "old-name v2", date="2026-01-20T10:00:00+00:00")
    git(repo, "mv", "manifests/old-name.toml", "manifests/new-name.toml")
    git(repo, "mv", "patches/old-name", "patches/new-name")
    manifest = repo / "manifests" / "new-name.toml"
    manifest.write_text(manifest.read_text().replace('name = "old-name"', 'name = "new-name"'))
    git(repo, "commit", "-qam", "rename old-name -> new-name", date="2026-02-01T10:00:00+00:00")

    versions = lineage.build(Catalog(repo)).get("new-name").versions
    # v1 and v2 keep the commits that made them; the rename, which makes no version, is a
    # commit of the fix under the version it declared (as an edit of its rationale would be)
    assert [[c.subject for c in v.commits] for v in versions] == [
        ["old-name v1"], ["old-name v2", "rename old-name -> new-name"]]
    result = CliRunner().invoke(cli, ["--catalog", str(repo), "diff", "new-name", "--versions",
                                      "1", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"v1/{patch.name}" in result.output and f"v2/{patch.name}" in result.output


def test_a_name_reused_after_a_rename_starts_its_own_history(tmp_path: Path) -> None:
    """After `old-name` was renamed to `new-name`, a new fix took the name `old-name`: its
    `log` listed the commits of the fix that had the name before, up to the rename (a trial).
    A name's commits before it was renamed away are the other fix's."""
    repo = tmp_path / "catalog"
    src = SAMPLES / "catalog"
    text = (src / "manifests" / "index-k-bytes.toml").read_text()
    shutil.copytree(src / "patches" / "index-k-bytes", repo / "patches" / "old-name")
    (repo / "manifests").mkdir()
    (repo / "manifests" / "old-name.toml").write_text(text.replace('name = "index-k-bytes"',
                                                                   'name = "old-name"'))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "old-name v2")
    git(repo, "mv", "manifests/old-name.toml", "manifests/new-name.toml")
    git(repo, "mv", "patches/old-name", "patches/new-name")
    manifest = repo / "manifests" / "new-name.toml"
    manifest.write_text(manifest.read_text().replace('name = "old-name"', 'name = "new-name"'))
    git(repo, "commit", "-qam", "rename old-name -> new-name")
    shutil.copytree(src / "patches" / "index-k-bytes", repo / "patches" / "old-name")
    (repo / "manifests" / "old-name.toml").write_text(text.replace('name = "index-k-bytes"',
                                                                   'name = "old-name"'))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a new fix named old-name")
    lin = lineage.build(Catalog(repo))
    reused = [c.subject for v in lin.get("old-name").versions for c in v.commits]
    assert reused == ["a new fix named old-name"], reused
    renamed = [c.subject for v in lin.get("new-name").versions for c in v.commits]
    assert "old-name v2" in renamed and "a new fix named old-name" not in renamed, renamed
