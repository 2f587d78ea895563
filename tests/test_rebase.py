"""`patchkit rebase`: each classification, --continue/--skip/--abort, on real git histories.

Fast tests build a small upstream clone (tags v0.1.0, v0.2.0) in tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit import api, rebase
from patchkit.catalog import edit, series
from patchkit.catalog import Catalog
from patchkit.cli.main import cli
from patchkit.errors import UsageError
from patchkit.targets import LocalTarget
from patchkit.upstream import UpstreamRepo

BODY = [f"line {i}\n" for i in range(1, 41)]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def _write_release(repo: Path, files: dict[str, str], tag: str) -> None:
    for path, text in files.items():
        f = repo / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"release {tag}")
    _git(repo, "tag", tag)


def _fix(cat: Path, name: str, path: str, before: str, after: str, *,
         anchors: tuple[str, ...] = ()) -> None:
    (cat / "patches" / name).mkdir(parents=True)
    patch = f"0001-{name}.patch"
    text = f"From: t <t@example.com>\nSubject: [PATCH] {name}\n\n---\n"
    text += series.diff_files(before.encode(), after.encode(), path)
    (cat / "patches" / name / patch).write_text(text)
    mtext = edit.new_manifest_text(name, f"{name} title", "0.1.0", [(patch, "sglang")],
                                       "Why.", date="2026-01-01")
    for a in anchors:
        mtext += (f'\n[[preconditions]]\nkind = "grep"\npath = "{path}"\n'
                  f'pattern = "{a}"\ncount = 1\n')
    (cat / "manifests").mkdir(exist_ok=True)
    (cat / "manifests" / f"{name}.toml").write_text(mtext)


@pytest.fixture
def world(tmp_path: Path):
    """An upstream clone with 0.1.0 and 0.2.0, and a catalog of one fix per classification."""
    up = tmp_path / "upstream"
    up.mkdir()
    _git(up, "init", "-q", "-b", "main")
    old = {f"python/sglang/{n}.py": "".join(BODY) for n in
           ("same", "shift", "up", "picked", "merge", "anchor", "clash")}
    _write_release(up, old, "v0.1.0")
    new = dict(old)
    new["python/sglang/shift.py"] = "# new header\n# two\n" + "".join(BODY)
    new["python/sglang/up.py"] = "".join(BODY).replace("line 10\n", "line 10 fixed\n").replace(
        "line 36\n", "line 36 also\n")  # holds the fix, but not as the fix's own diff
    new["python/sglang/picked.py"] = "".join(BODY).replace("line 10\n", "line 10 fixed\n")
    new["python/sglang/merge.py"] = "".join(BODY).replace("line 8\n", "line 8 upstream\n")
    new["python/sglang/anchor.py"] = "".join(BODY).replace("line 12\n", "line twelve\n")
    new["python/sglang/clash.py"] = "".join(BODY).replace("line 10\n", "line 10 theirs\n")
    _write_release(up, new, "v0.2.0")
    cat = tmp_path / "catalog"
    base = "".join(BODY)
    for name in ("same", "shift", "up", "picked", "merge", "clash"):
        _fix(cat, name, f"python/sglang/{name}.py", base, base.replace("line 10\n", "line 10 fixed\n"))
    _fix(cat, "anchor", "python/sglang/anchor.py", base,
         base.replace("line 11\n", "line 11 fixed\n"), anchors=("line 12",))
    _git(cat, "init", "-q", "-b", "main")
    _git(cat, "add", "-A")
    _git(cat, "commit", "-q", "-m", "catalog v1")
    return Catalog(cat), UpstreamRepo(up)


def _snapshot(cat: Catalog) -> dict[str, bytes]:
    return {str(p.relative_to(cat.root)): p.read_bytes()
            for d in (cat.manifests_dir, cat.patches_dir) for p in sorted(d.rglob("*")) if p.is_file()}


def _classes(report: rebase.RebaseReport) -> dict[str, str]:
    return {f.name: (f.patches[0].classification if f.patches else f.outcome) for f in report.fixes}


def test_each_clean_classification_and_what_is_written(world) -> None:
    cat, up = world
    seen: list[tuple[str, int, int]] = []
    report = rebase.start(cat, "0.2.0", ["same", "shift", "up", "picked", "merge"], upstream=up,
                          progress=lambda w, d, t: seen.append((w, d, t)))
    assert report.done
    assert _classes(report) == {"same": "unchanged", "shift": "offset", "up": "upstream",
                                "picked": "upstream", "merge": "merged"}
    outcomes = {f.name: f.outcome for f in report.fixes}
    assert outcomes == {"same": "extended", "shift": "rebased", "up": "upstreamed",
                        "picked": "upstreamed", "merge": "rebased"}
    by_name = {f.name: f for f in report.fixes}
    # the release commit's diff of picked.py is the fix's: found by patch-id, commit named
    release_commit = _git(up.path, "rev-parse", "v0.2.0").strip()
    assert by_name["picked"].patches[0].commit == release_commit
    assert "patch-id" in by_name["picked"].patches[0].detail
    assert release_commit[:12] in by_name["picked"].detail
    # up.py changed more than the fix: no patch-id match, the reversed hunks apply
    assert by_name["up"].patches[0].commit == ""
    assert "reversed hunks apply" in by_name["up"].patches[0].detail
    assert report.fixes[1].patches[0].offsets == (2,)
    assert any(w == "classifying merge" for w, _d, _t in seen)
    fresh = Catalog(cat.root)
    assert fresh.get("same").version == 1 and fresh.get("same").upstream.releases == ("0.1.0", "0.2.0")
    shift = fresh.get("shift")
    assert shift.version == 2 and shift.upstream.base_release == "0.2.0"
    assert shift.upstream.releases == ("0.2.0",)
    assert "Rebased from 0.1.0 onto 0.2.0" in shift.changelog[-1].summary
    assert "@@ -9,7 +9,7 @@" in (cat.patches_dir / "shift" / "0001-shift.patch").read_text()
    assert fresh.get("up").version == 1  # only proposed for upstreamed, never written
    assert not (cat.root / rebase.STATE_DIR).exists()
    # the refreshed series applies to the new release with zero fuzz and its result is the merge
    tree = up.checkout("0.2.0", cat.root.parent / "t020")
    api.apply(fresh, LocalTarget({"sglang": str(tree)}), ["merge", "shift"])
    merged = (tree / "python/sglang/merge.py").read_text()
    assert "line 8 upstream\n" in merged and "line 10 fixed\n" in merged
    # the old version stays readable from the catalog's git history once committed
    _git(cat.root, "commit", "-qam", "rebase onto 0.2.0")
    rd = rebase.range_diff(Catalog(cat.root), "shift", 1, 2)
    assert "-@@ -7,7 +7,7 @@" in rd and "+@@ -9,7 +9,7 @@" in rd


def test_anchor_gone_stops_then_continue_with_the_edited_file(world) -> None:
    cat, up = world
    report = rebase.start(cat, "0.2.0", ["anchor"], upstream=up)
    assert not report.done and report.stopped == "anchor"
    assert report.fixes[-1].patches[0].classification == "anchor-gone"
    assert "line 12" in report.fixes[-1].patches[0].detail
    wt = Path(report.worktree)
    f = wt / "python/sglang/anchor.py"
    assert "line 11 fixed\n" in f.read_text()
    f.write_text("".join(BODY).replace("line 11\n", "line 11 fixed\n")
                 .replace("line 12\n", "line twelve\n"))
    report = rebase.continue_(cat, upstream=up)
    assert report.done and report.fixes[0].patches[0].classification == "resolved"
    assert Catalog(cat.root).get("anchor").version == 2
    assert not wt.exists()


def test_conflict_leaves_markers_then_continue(world) -> None:
    cat, up = world
    before = _snapshot(cat)
    report = rebase.start(cat, "0.2.0", ["clash"], upstream=up)
    assert report.stopped == "clash" and report.conflicted == ("python/sglang/clash.py",)
    assert report.fixes[-1].patches[0].classification == "conflict"
    assert _snapshot(cat) == before  # nothing written until the fix completes
    f = Path(report.worktree) / "python/sglang/clash.py"
    assert "<<<<<<< 0.2.0" in f.read_text() and ">>>>>>> clash" in f.read_text()
    with pytest.raises(UsageError, match="conflict markers"):
        rebase.continue_(cat, upstream=up)
    with pytest.raises(UsageError, match="in progress"):
        rebase.start(cat, "0.2.0", ["clash"], upstream=up)
    f.write_text("".join(BODY).replace("line 10\n", "line 10 theirs and fixed\n"))
    report = rebase.continue_(cat, upstream=up)
    assert report.done
    text = (cat.patches_dir / "clash" / "0001-clash.patch").read_text()
    assert "-line 10 theirs\n+line 10 theirs and fixed\n" in text


def test_skip_leaves_the_fix_and_goes_on(world) -> None:
    cat, up = world
    before = (cat.manifests_dir / "clash.toml").read_bytes()
    report = rebase.start(cat, "0.2.0", ["clash", "shift"], upstream=up)
    assert report.stopped == "clash"
    report = rebase.skip(cat, upstream=up)
    assert report.done
    assert {f.name: f.outcome for f in report.fixes} == {"clash": "skipped", "shift": "rebased"}
    assert (cat.manifests_dir / "clash.toml").read_bytes() == before


def test_abort_restores_the_catalog_byte_for_byte(world) -> None:
    cat, up = world
    before = _snapshot(cat)
    report = rebase.start(cat, "0.2.0", ["shift", "clash"], upstream=up)
    assert report.stopped == "clash" and _snapshot(cat) != before  # shift was written
    assert rebase.abort(cat, upstream=up) == ["shift"]
    assert _snapshot(cat) == before
    assert not (cat.root / rebase.STATE_DIR).exists()
    assert _git(cat.root, "status", "--porcelain") == ""
    with pytest.raises(UsageError, match="no rebase in progress"):
        rebase.continue_(cat, upstream=up)


def test_cli_rebase_table_json_and_exit_codes(world, monkeypatch) -> None:
    cat, up = world
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(up.path))
    runner = CliRunner()
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "shift", "clash",
                              "--onto", "0.2.0", "--json"])
    assert res.exit_code == 3, res.output
    data = json.loads(res.stdout)
    assert data["stopped"] == "clash" and data["fixes"][0]["outcome"] == "rebased"
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--abort"])
    assert res.exit_code == 0 and "aborted" in res.output
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--all", "--onto", "0.2.0"])
    assert res.exit_code == 3
    assert "anchor-gone" in res.stdout and "--continue" in res.stdout  # anchor: first by name
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--skip"])
    assert res.exit_code == 3 and "conflict" in res.stdout  # then clash
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--skip"])
    assert res.exit_code == 0, res.output
    assert "offset" in res.stdout and "upstream" in res.stdout and "unchanged" in res.stdout
    written = sum(1 for row in res.stdout.splitlines() if "\tv1 -> " in row or "\tupstream\t" in row
                  or "\tunchanged\t" in row)  # the fixes it wrote (a new version or release)
    said = " ".join(res.stdout.split())
    assert (f"rebase done: {written} fix(es) written; review the catalog's diff and commit it "
            "(`patchkit log` and `diff --versions` read each version from the catalog's git "
            "history)") in said, res.stdout  # it said "rebase done", whatever it wrote
    # why to commit, not "before the next rebase", which does not need it (a trial)
    assert "before the next rebase" not in said
    res = runner.invoke(cli, ["--catalog", str(cat.root), "diff", "shift", "--versions", "1", "7"])
    assert isinstance(res.exception, UsageError) and "no version 7" in str(res.exception)
    res = runner.invoke(cli, ["--catalog", str(cat.root), "diff", "shift", "--versions", "1", "2",
                              "--json"])
    assert res.exit_code == 0 and "+@@ -9,7 +9,7 @@" in json.loads(res.stdout)["diff"]


def test_plan_at_start_then_continue_recomputes_a_dependent_fix(world) -> None:
    """Every fix is classified at the start; after --continue the fix that depends on the
    stopped one (and the one sharing its file) is computed again, against the resolution."""
    cat, up = world
    base = "".join(BODY)
    _fix(cat.root, "after", "python/sglang/clash.py", base,
         base.replace("line 30\n", "line 30 after\n"))
    mpath = cat.manifests_dir / "after.toml"
    mpath.write_text(mpath.read_text().replace("depends_on = []", 'depends_on = ["clash"]', 1))
    _fix(cat.root, "share", "python/sglang/clash.py", base,
         base.replace("line 35\n", "line 35 shared\n"))
    cat = Catalog(cat.root)
    report = rebase.start(cat, "0.2.0", ["clash", "after", "share"], upstream=up)
    assert report.stopped == "clash"
    state = json.loads((cat.root / rebase.STATE_DIR / "state.json").read_text())
    plan = state["plan"]
    # planned as if clash were skipped: its old series does not apply, so neither can "after"
    assert plan["after"]["report"]["outcome"] == "skipped"
    assert "dependency clash" in plan["after"]["report"]["detail"]
    assert plan["share"]["report"]["outcome"] == "extended"
    f = Path(report.worktree) / "python/sglang/clash.py"
    f.write_text(base.replace("line 10\n", "line 10 theirs and fixed\n"))
    seen: list[str] = []
    report = rebase.continue_(cat, upstream=up, progress=lambda w, _d, _t: seen.append(w))
    assert report.done
    outcomes = {f.name: f.outcome for f in report.fixes}
    assert outcomes == {"clash": "rebased", "after": "extended", "share": "extended"}, report.fixes
    assert "rebasing after: 0001-after.patch" in seen and "rebasing share: 0001-share.patch" in seen
    assert "0.2.0" in Catalog(cat.root).get("after").upstream.releases


def test_skip_takes_the_planned_results_without_classifying_again(world) -> None:
    cat, up = world
    report = rebase.start(cat, "0.2.0", ["clash", "shift", "merge"], upstream=up)
    assert report.stopped == "clash"
    seen: list[str] = []
    report = rebase.skip(cat, upstream=up, progress=lambda w, _d, _t: seen.append(w))
    assert report.done and {f.name: f.outcome for f in report.fixes} == {
        "clash": "skipped", "shift": "rebased", "merge": "rebased"}
    assert not any(":" in w for w in seen)  # no patch was classified again
    assert Catalog(cat.root).get("merge").version == 2


def test_merge_through_git_merge_file_then_skip_through_the_cli(world, monkeypatch) -> None:
    """git's merge machinery (``git merge-file``, through the one git runner the client shares
    with the engine) at the start; a --skip in another process writes the planned results."""
    from patchkit.engine import gitcli

    cat, up = world
    calls: list[tuple] = []
    real = gitcli.run

    def spy(root, args, *rest, **kwargs):
        calls.append(tuple(args))
        return real(root, args, *rest, **kwargs)

    monkeypatch.setattr(gitcli, "run", spy)
    report = rebase.start(cat, "0.2.0", ["clash", "merge"], upstream=up)
    assert report.stopped == "clash"
    assert any("merge-file" in c for c in calls)  # the merge of "merge", and of "clash"
    proc = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(cat.root), "rebase",
                           "--skip", "--json"], capture_output=True, text=True,
                          env={**os.environ, "PATCHKIT_UPSTREAM": str(up.path)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["done"] and Catalog(cat.root).get("merge").version == 2


def test_abort_after_planned_writes_restores_everything(world) -> None:
    cat, up = world
    before = _snapshot(cat)
    report = rebase.start(cat, "0.2.0", ["anchor", "shift", "clash", "merge"], upstream=up)
    assert report.stopped == "anchor"
    report = rebase.skip(cat, upstream=up)
    assert report.stopped == "clash" and _snapshot(cat) != before
    assert rebase.abort(cat, upstream=up) == ["shift"]
    assert _snapshot(cat) == before


# -- an SGLang git clone with real upstream commits (patch-id) --------------------------------

PICKED = "python/sglang/srt/model_executor/pool_configurator.py"
MOVED = "python/sglang/srt/mem_cache/memory_pool_host.py"
OTHER = "python/sglang/__init__.py"


def _edit(repo: Path, path: str, at: int, lines: str) -> tuple[str, str]:
    f = repo / path
    old = f.read_text()
    parts = old.splitlines(keepends=True)
    new = "".join(parts[:at]) + lines + "".join(parts[at:])
    f.write_text(new)
    return old, new


@pytest.fixture
def sglang_clone(upstream_repo: UpstreamRepo, tmp_path: Path):
    """A clone at the real v0.5.21, then upstream-style commits; the fixes written on 0.5.21."""
    clone = tmp_path / "sglang"
    _git(tmp_path, "clone", "-q", "--branch", "v0.5.21", str(upstream_repo.git_dir), str(clone))
    _git(clone, "switch", "-q", "-c", "main-dev")
    cat = tmp_path / "catalog"
    # the fixes, against 0.5.21
    old, new = _edit(clone, PICKED, 20, "# count the bf16 index-K bytes once more\n")
    picked = (old, new)
    old2, new2 = _edit(clone, MOVED, 200, "# keep host pages pinned\n")
    moved = (old2, new2)
    _git(clone, "checkout", "-q", "--", ".")
    _fix(cat, "picked", PICKED, *picked)
    _fix(cat, "moved", MOVED, *moved)
    for name in ("picked", "moved"):
        m = cat / "manifests" / f"{name}.toml"
        m.write_text(m.read_text().replace('"0.1.0"', '"0.5.21"'))
    # upstream: an unrelated commit, the cherry-pick (another message, another file too),
    # and a commit moving the lines under "moved"
    _edit(clone, OTHER, 0, "# upstream: unrelated\n")
    _git(clone, "commit", "-qam", "Unrelated upstream change")
    (clone / PICKED).write_text(picked[1])
    _edit(clone, OTHER, 0, "# upstream: also touched by the pick\n")
    _git(clone, "commit", "-qam", "[Memory] Account for bf16 index K (#4242)")
    pick_sha = _git(clone, "rev-parse", "HEAD").strip()
    _edit(clone, MOVED, 1, "# upstream one\n# upstream two\n# upstream three\n")
    _git(clone, "commit", "-qam", "Header for the host pool")
    return Catalog(cat), clone, pick_sha


@pytest.mark.network
def test_clone_commit_patch_id_names_the_upstream_commit(sglang_clone) -> None:
    cat, clone, pick_sha = sglang_clone
    before = _snapshot(cat)
    head = _git(clone, "rev-parse", "HEAD").strip()
    res = CliRunner().invoke(cli, ["--catalog", str(cat.root), "rebase", "--all", "--repo",
                                   str(clone), "--base", "v0.5.21", "--onto", head, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    fixes = {f["name"]: f for f in data["fixes"]}
    assert fixes["picked"]["outcome"] == "upstreamed"
    patch = fixes["picked"]["patches"][0]
    assert patch["classification"] == "upstream" and patch["commit"] == pick_sha
    assert "patch-id" in patch["detail"] and pick_sha[:12] in fixes["picked"]["detail"]
    assert fixes["moved"]["outcome"] == "clean"  # not a release: reported, not written
    assert fixes["moved"]["patches"][0]["classification"] == "offset"
    assert fixes["moved"]["patches"][0]["offsets"] == [3]
    assert _snapshot(cat) == before and not rebase.in_progress(cat)


@pytest.mark.network
def test_clone_release_tag_rebases_and_writes(sglang_clone) -> None:
    cat, clone, pick_sha = sglang_clone
    _git(clone, "tag", "v0.5.22")
    report = rebase.start(cat, "v0.5.22", repo=clone)
    assert report.done and report.onto == "0.5.22"
    outcomes = {f.name: f.outcome for f in report.fixes}
    assert outcomes == {"moved": "rebased", "picked": "upstreamed"}
    moved = Catalog(cat.root).get("moved")
    assert moved.version == 2 and moved.upstream.base_release == "0.5.22"
    # the refreshed series applies to the clone's commit as it is (git apply never fuzzes)
    tree = clone.parent / "check"
    _git(clone.parent, "clone", "-q", "--branch", "v0.5.22", str(clone), str(tree))
    _git(tree, "apply", str(cat.patches_dir / "moved" / "0001-moved.patch"))
    assert "# keep host pages pinned\n" in (tree / MOVED).read_text()
    with pytest.raises(UsageError, match="no such release or commit"):
        rebase.start(cat, "v9.9.9", repo=clone)


def test_onto_nothing_the_release_store_knows_names_what_it_holds(
        upstream_repo: UpstreamRepo, tmp_path: Path) -> None:
    """Without --repo, --onto is looked for in patchkit's release store: the refusal says
    which releases it holds and where a clone's commit goes (it spoke of "the clone")."""
    (tmp_path / "cat" / "manifests").mkdir(parents=True)
    with pytest.raises(UsageError) as refused:
        rebase.start(Catalog(tmp_path / "cat"), "nosuch", upstream=upstream_repo)
    said = str(refused.value)
    assert "it holds 0.5.21" in said and "--repo" in said, said
    assert "of the clone" not in said


def test_onto_a_commit_that_is_not_a_release_reports_and_writes_nothing(world) -> None:
    cat, up = world
    before = _snapshot(cat)
    report = rebase.start(cat, "main", ["clash", "shift", "picked"], repo=up.path)
    assert report.done and report.onto == "main"
    assert {f.name: f.outcome for f in report.fixes} == {
        "clash": "conflict", "shift": "clean", "picked": "upstreamed"}
    assert _snapshot(cat) == before and not rebase.in_progress(cat)
    with pytest.raises(UsageError, match="no such commit"):
        rebase.start(cat, "main", ["shift"], repo=up.path, base="nope")


def test_a_series_upstream_committed_as_one_commit_is_found_by_its_patch_id(tmp_path) -> None:
    """A fix of two git format-patch mails (mbox line, diffstat, signature) that upstream
    took as one commit: the whole series' patch-id names that commit."""
    up, cat = tmp_path / "upstream", tmp_path / "catalog"
    up.mkdir()
    _git(up, "init", "-q", "-b", "main")
    base = "".join(BODY)
    _write_release(up, {"python/sglang/a.py": base, "python/sglang/b.py": base}, "v0.1.0")
    _git(up, "switch", "-q", "-c", "fork")
    (up / "python/sglang/a.py").write_text(base.replace("line 5\n", "line 5 fixed\n"))
    _git(up, "commit", "-qam", "fix a")
    (up / "python/sglang/b.py").write_text(base.replace("line 20\n", "line 20 fixed\n"))
    _git(up, "commit", "-qam", "fix b")
    _git(up, "format-patch", "-q", "-o", str(cat / "patches" / "pair"), "v0.1.0..fork")
    _git(up, "switch", "-q", "main")
    _git(up, "checkout", "fork", "--", ".")
    _git(up, "commit", "-qm", "Take the pair of fixes (#7)")
    pick = _git(up, "rev-parse", "HEAD").strip()
    _write_release(up, {"python/sglang/c.py": base}, "v0.2.0")
    files = sorted(p.name for p in (cat / "patches" / "pair").iterdir())
    (cat / "manifests").mkdir()
    (cat / "manifests" / "pair.toml").write_text(edit.new_manifest_text(
        "pair", "pair title", "0.1.0", [(f, "sglang") for f in files], "Why.", date="2026-01-01"))
    report = rebase.start(Catalog(cat), "0.2.0", ["pair"], upstream=UpstreamRepo(up))
    (fix,) = report.fixes
    assert fix.outcome == "upstreamed" and pick[:12] in fix.detail, fix
    assert [p.commit for p in fix.patches] == [pick, pick]
    assert all("patch-id" in p.detail for p in fix.patches)


# -- dependencies rebased in an earlier run, dead fixes, revert fixes ------------------------


def _set(cat: Path, name: str, old: str, new: str) -> None:
    path = cat / "manifests" / f"{name}.toml"
    text = path.read_text()
    assert old in text, (name, old)
    path.write_text(text.replace(old, new, 1))


def _checked_out(up: UpstreamRepo, tag: str, dest: Path) -> Path:
    _git(dest.parent, "clone", "-q", "--branch", tag, str(up.path), str(dest))
    return dest


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "not-committed"])
def test_a_dependency_rebased_in_an_earlier_run_then_its_dependent(world, committed: bool) -> None:
    """Run 1 rebases "merge" (its v2 does not apply to 0.1.0); run 2 rebases "child", which
    depends on it: the old side takes merge's v1 (based on 0.1.0) from the catalog's history,
    the new side merge's v2. Run 1's result not committed yet serves as well: the rebase said
    to commit it "before the next rebase", which the next rebase does not need (a trial)."""
    cat, up = world
    base = "".join(BODY)
    _fix(cat.root, "child", "python/sglang/merge.py", base.replace("line 10\n", "line 10 fixed\n"),
         base.replace("line 10\n", "line 10 fixed twice\n"))
    _set(cat.root, "child", "depends_on = []", 'depends_on = ["merge"]')
    _git(cat.root, "add", "-A")
    _git(cat.root, "commit", "-qm", "child")
    report = rebase.start(Catalog(cat.root), "0.2.0", ["merge"], upstream=up)
    assert [(f.name, f.outcome) for f in report.fixes] == [("merge", "rebased")]
    if committed:
        _git(cat.root, "commit", "-qam", "merge onto 0.2.0")
    merge_v2 = (cat.patches_dir / "merge" / "0001-merge.patch").read_text()
    assert " line 8 upstream\n" in merge_v2  # context of 0.2.0: does not apply to 0.1.0

    cat = Catalog(cat.root)
    report = rebase.start(cat, "0.2.0", ["child"], upstream=up)
    assert report.done and [(f.name, f.outcome) for f in report.fixes] == [("child", "rebased")]
    assert report.fixes[0].patches[0].classification == "merged"
    child = Catalog(cat.root).get("child")
    assert (child.version, child.upstream.base_release) == (2, "0.2.0")
    tree = _checked_out(up, "v0.2.0", cat.root.parent / "check")
    for name in ("merge", "child"):
        _git(tree, "apply", str(cat.patches_dir / name / f"0001-{name}.patch"))
    text = (tree / "python/sglang/merge.py").read_text()
    assert "line 8 upstream\n" in text and "line 10 fixed twice\n" in text


def test_a_dependency_without_a_version_on_the_fix_base_stops_that_fix(world) -> None:
    """"late" was written on 0.2.0 only; "child" (on 0.1.0) depends on it: no version of
    late to build child's old side with. The fix is not rebased, the message says why and
    what to do, and the catalog is unchanged."""
    cat, up = world
    base = "".join(BODY)
    _fix(cat.root, "late", "python/sglang/same.py", base, base.replace("line 5\n", "line 5 late\n"))
    path = cat.root / "manifests" / "late.toml"
    path.write_text(path.read_text().replace('"0.1.0"', '"0.2.0"'))
    _fix(cat.root, "child", "python/sglang/shift.py", base, base.replace("line 20\n", "line 2O\n"))
    _set(cat.root, "child", "depends_on = []", 'depends_on = ["late"]')
    cat = Catalog(cat.root)
    assert cat.get("late").upstream.base_release == "0.2.0"
    before = _snapshot(cat)
    report = rebase.start(cat, "0.2.0", ["child"], upstream=up)
    assert report.done
    (child,) = report.fixes
    assert child.outcome == "skipped"
    assert "dependency late has no version based on 0.1.0" in child.detail
    assert "v1 on 0.2.0" in child.detail and "rebase child together with late" in child.detail
    assert _snapshot(cat) == before and not rebase.in_progress(cat)


def test_a_dead_fix_is_rebased_when_named_or_with_include_inactive(world, monkeypatch) -> None:
    cat, up = world
    _set(cat.root, "shift", 'status = "active"', 'status = "dead"')
    cat = Catalog(cat.root)
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(up.path))
    runner = CliRunner()
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--all", "--onto", "0.2.0",
                              "--json"])
    assert res.exit_code == 3  # anchor stops first; shift is planned skipped as dead
    plan = json.loads((cat.root / rebase.STATE_DIR / "state.json").read_text())["plan"]
    assert plan["shift"]["report"]["outcome"] == "skipped"
    assert "--include-inactive" in plan["shift"]["report"]["detail"]
    assert runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--abort"]).exit_code == 0

    report = rebase.start(cat, "0.2.0", ["shift"], upstream=up)
    assert [(f.name, f.outcome) for f in report.fixes] == [("shift", "rebased")]
    shift = Catalog(cat.root).get("shift")
    assert (shift.status, shift.version, shift.upstream.base_release) == ("dead", 2, "0.2.0")
    _git(cat.root, "checkout", "-q", "--", "manifests", "patches")

    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--all", "--include-inactive",
                              "--onto", "0.2.0", "--json"])
    assert res.exit_code == 3
    plan = json.loads((cat.root / rebase.STATE_DIR / "state.json").read_text())["plan"]
    assert plan["shift"]["report"]["outcome"] == "rebased"


def test_a_revert_fix_is_rebased_against_the_reverted_fix(world) -> None:
    """"unmerge" ([revert] fix = "merge") removes merge's change. Old side: 0.1.0 + merge v1;
    new side: 0.2.0 + merge's rebased v2. Named first, it is still taken after merge; its new
    series undoes merge v2 exactly on 0.2.0."""
    cat, up = world
    base = "".join(BODY)
    _fix(cat.root, "unmerge", "python/sglang/merge.py",
         base.replace("line 10\n", "line 10 fixed\n"), base)
    _set(cat.root, "unmerge", "[[patches]]", '[revert]\nfix = "merge"\n\n[[patches]]')
    cat = Catalog(cat.root)
    assert cat.get("unmerge").revert.fix == "merge"
    report = rebase.start(cat, "0.2.0", ["unmerge", "merge"], upstream=up)
    assert report.done
    assert [(f.name, f.outcome) for f in report.fixes] == [("merge", "rebased"),
                                                            ("unmerge", "rebased")]
    assert report.fixes[1].patches[0].classification == "merged"
    unmerge = Catalog(cat.root).get("unmerge")
    assert (unmerge.version, unmerge.upstream.base_release) == (2, "0.2.0")
    assert unmerge.revert.fix == "merge"
    tree = _checked_out(up, "v0.2.0", cat.root.parent / "check")
    release = (tree / "python/sglang/merge.py").read_text()
    _git(tree, "apply", str(cat.patches_dir / "merge" / "0001-merge.patch"))
    assert "line 10 fixed\n" in (tree / "python/sglang/merge.py").read_text()
    _git(tree, "apply", str(cat.patches_dir / "unmerge" / "0001-unmerge.patch"))
    assert (tree / "python/sglang/merge.py").read_text() == release


def test_a_revert_fix_in_a_later_run_takes_the_reverted_fix_from_the_history(world) -> None:
    cat, up = world
    base = "".join(BODY)
    _fix(cat.root, "unmerge", "python/sglang/merge.py",
         base.replace("line 10\n", "line 10 fixed\n"), base)
    _set(cat.root, "unmerge", "[[patches]]", '[revert]\nfix = "merge"\n\n[[patches]]')
    _set(cat.root, "merge", 'status = "active"', 'status = "dead"')
    _git(cat.root, "add", "-A")
    _git(cat.root, "commit", "-qm", "unmerge")
    cat = Catalog(cat.root)
    # --all without the dead fix: the revert has nothing to stand on at 0.2.0
    report = rebase.start(cat, "0.2.0", ["unmerge"], upstream=up)
    (only,) = report.fixes
    assert only.outcome == "skipped" and "dependency merge" in only.detail
    assert "--include-inactive" in only.detail
    report = rebase.start(cat, "0.2.0", ["merge"], upstream=up)
    assert [(f.name, f.outcome) for f in report.fixes] == [("merge", "rebased")]
    _git(cat.root, "commit", "-qam", "merge onto 0.2.0")
    report = rebase.start(Catalog(cat.root), "0.2.0", ["unmerge"], upstream=up)
    assert [(f.name, f.outcome) for f in report.fixes] == [("unmerge", "rebased")]
    assert " line 8 upstream\n" in (cat.patches_dir / "unmerge" / "0001-unmerge.patch").read_text()


# -- what the output says: skipped, stopped, nothing written (issue 13, item 16) ------------


def _rows(stdout: str, fix: str) -> list[list[str]]:
    """The table rows (cells) whose fix column is ``fix`` (rich's box or plain text)."""
    rows = []
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│")]
        cells = ([c for c in cells if c != ""] if "│" in line
                 else line.split("\t") if "\t" in line else line.split())
        if cells and cells[0] == fix:
            rows.append(cells)
    return rows


def test_a_skipped_fix_shows_skipped_not_conflict(world, monkeypatch) -> None:
    cat, up = world
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(up.path))
    monkeypatch.setenv("COLUMNS", "250")
    runner = CliRunner()
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "clash", "shift",
                              "--onto", "0.2.0"])
    assert res.exit_code == 3
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--skip"])
    assert res.exit_code == 0, res.output
    (clash,) = _rows(res.stdout, "clash")
    assert clash[3] == "skipped", clash  # the result column; the conflict stays as the detail
    assert clash[4].startswith("conflict: three-way merge conflicts")
    (shift,) = _rows(res.stdout, "shift")
    assert shift[3] == "offset"
    # piped: plain tab-separated lines as every command writes them, no box table (issue 25, 13)
    assert not any(c in res.stdout for c in "│┃━─┏┡└")
    table = [line for line in res.stdout.splitlines() if line.startswith(("clash\t", "shift\t"))]
    assert len(table) == 2 and all(line.count("\t") == 4 for line in table), res.stdout


def test_bare_rebase_while_stopped_says_where_and_what_to_do(world, monkeypatch) -> None:
    cat, up = world
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(up.path))
    monkeypatch.setenv("COLUMNS", "250")
    runner = CliRunner()
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase"])
    assert isinstance(res.exception, UsageError) and "name the release" in str(res.exception)
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "shift", "clash", "merge",
                              "--onto", "0.2.0"])
    assert res.exit_code == 3
    # the command to run next names the catalog given: bare, it would look elsewhere
    assert f"then run `patchkit --catalog {cat.root} rebase --continue`" in " ".join(
        res.stdout.split())
    state_before = _snapshot_state(cat)
    catalog_before = _snapshot(cat)
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase"])
    assert res.exit_code == 3, res.output  # still stopped: the conflict exit code
    out = res.stdout
    assert "rebase onto 0.2.0 in progress: 1 fix(es) done" in out
    assert "still to do after the stopped one: merge" in out
    assert "stopped at clash v1, patch 0001-clash.patch (conflict:" in out  # the version, as the stop
    worktree = cat.root / rebase.STATE_DIR / "worktree"
    assert f"resolve the conflicts in {worktree}" in out
    assert "python/sglang/clash.py" in out
    for step in ("--continue", "--skip", "--abort"):
        assert f"patchkit --catalog {cat.root} rebase {step}" in out
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--json"])
    assert res.exit_code == 3
    data = json.loads(res.stdout)
    assert data["in_progress"] and data["stopped"] == "clash" and data["remaining"] == ["merge"]
    assert [f["outcome"] for f in data["fixes"]] == ["rebased", "stopped"]
    assert data["worktree"] == str(worktree) and data["conflicted"] == ["python/sglang/clash.py"]
    assert _snapshot_state(cat) == state_before and _snapshot(cat) == catalog_before
    report = rebase.skip(cat, upstream=up)  # the state it read is the one --skip goes on from
    assert report.done and [f.name for f in report.fixes] == ["shift", "clash", "merge"]


def _snapshot_state(cat: Catalog) -> dict[str, bytes]:
    state = cat.root / rebase.STATE_DIR
    return {str(p.relative_to(state)): p.read_bytes() for p in sorted(state.rglob("*"))
            if p.is_file()}


def test_a_report_only_run_says_nothing_was_written(world, monkeypatch) -> None:
    cat, up = world
    monkeypatch.setenv("COLUMNS", "250")
    before = _snapshot(cat)
    res = CliRunner().invoke(cli, ["--catalog", str(cat.root), "rebase", "clash", "shift",
                                   "--onto", "main", "--repo", str(up.path)])
    assert res.exit_code == 0, res.output
    assert "nothing was written (main is not a release" in res.stdout
    assert "rebase done" not in res.stdout
    res = CliRunner().invoke(cli, ["--catalog", str(cat.root), "rebase", "clash", "shift",
                                   "--onto", "main", "--repo", str(up.path), "--json"])
    data = json.loads(res.stdout)
    assert data["dry_run"] and "not a release" in data["not_written"]
    assert _snapshot(cat) == before and not (cat.root / rebase.STATE_DIR).exists()


def test_progress_names_each_fix_once_per_pass(world, monkeypatch) -> None:
    # A rebase classifies every fix first, then takes the queue: its progress said "rebasing
    # X" in both passes, so a dry run (which writes nothing) listed every fix twice.
    cat, up = world
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(up.path))
    monkeypatch.setenv("PATCHKIT_PROGRESS_AFTER", "0")  # every step as a plain line
    runner = CliRunner()
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--all", "--onto", "0.2.0",
                              "--dry-run"])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stderr.splitlines() if line.startswith("patchkit: ")]
    assert lines and len(lines) == len(set(lines)), res.stderr
    fixed = [line for line in lines if "(" in line]  # one line per fix, with its place in the queue
    assert fixed and all(line.startswith("patchkit: classifying ") for line in fixed), lines
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "shift", "same", "--onto",
                              "0.2.0"])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stderr.splitlines() if line.startswith("patchkit: ")]
    assert len(lines) == len(set(lines)), res.stderr
    # a line counts the fix it works on: the last one is 2/2, not 1/2
    assert "patchkit: classifying shift (1/2)" in lines and "patchkit: writing shift (1/2)" in lines
    assert "patchkit: writing same (2/2)" in lines, lines


def test_dry_run_onto_a_release_reports_without_stopping_and_writes_nothing(world,
                                                                          monkeypatch) -> None:
    cat, up = world
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(up.path))
    monkeypatch.setenv("COLUMNS", "250")
    before = _snapshot(cat)
    report = rebase.start(cat, "0.2.0", ["clash", "shift", "same", "picked"], upstream=up,
                          dry_run=True)
    assert report.done and report.dry_run and report.not_written == "--dry-run"
    assert {f.name: f.outcome for f in report.fixes} == {
        "clash": "conflict", "shift": "rebased", "same": "extended", "picked": "upstreamed"}
    assert {f.name: f.new_version for f in report.fixes}["shift"] == 2  # what it would write
    # said as what a rebase would give, not as done (a matrix cell shows this detail)
    shift = next(f for f in report.fixes if f.name == "shift")
    assert shift.detail.startswith("A rebase from 0.1.0 onto 0.2.0 would give: "), shift.detail
    assert _snapshot(cat) == before and not (cat.root / rebase.STATE_DIR).exists()
    runner = CliRunner()
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--all", "--onto", "0.2.0",
                              "--dry-run"])
    assert res.exit_code == 0, res.output  # never stops: a report
    assert "nothing was written (--dry-run)" in res.stdout
    assert _snapshot(cat) == before and not rebase.in_progress(cat)
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "-n", "shift", "--onto",
                              "0.2.0", "--json"])
    assert json.loads(res.stdout)["dry_run"] is True and _snapshot(cat) == before
    # the real run then does what the dry run said
    report = rebase.start(cat, "0.2.0", ["shift", "same"], upstream=up)
    assert {f.name: f.outcome for f in report.fixes} == {"shift": "rebased", "same": "extended"}
    res = runner.invoke(cli, ["--catalog", str(cat.root), "rebase", "--skip", "--dry-run"])
    assert isinstance(res.exception, UsageError)


def test_a_refreshed_hunk_keeps_three_lines_of_context_where_difflib_slides_it() -> None:
    """A method added before another, a blank line between each: difflib places the added
    block one line earlier than the common head and tail do, and the rebase's diff, made in
    a window 3 lines around the change, cut the hunk's leading context to 2 lines (GNU patch
    -F0 and dpkg-source refuse it; quilt needs fuzz). It is the whole file's diff."""
    from patchkit.catalog.series import diff_files
    from patchkit.rebase.classify import _diff

    methods = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(60))
    old = "class Pool:\n" + methods + "    def available_size(self):\n        return 0\n" + methods
    new = old.replace("    def available_size", "    def anchor_count(self):\n        return 0\n\n"
                      "    def available_size", 1)
    assert _diff(old, new, "pool.py") == diff_files(old.encode(), new.encode(), "pool.py")


def test_a_backport_onto_a_release_before_the_file_was_added_says_so(tmp_path) -> None:
    """A fix based on 0.2.0 changes a file 0.2.0 added, rebased back onto 0.1.0: the stop and
    --continue's refusal said the file was "removed or renamed upstream", and that a fix left
    with no change is marked upstream since 0.1.0, neither of which a backport does (a
    new-user trial). They say the file came after 0.1.0, and that 0.1.0's variant leaves the
    change out."""
    up = tmp_path / "upstream"
    up.mkdir()
    _git(up, "init", "-q", "-b", "main")
    base = "".join(BODY)
    _write_release(up, {"python/sglang/kept.py": base}, "v0.1.0")
    _write_release(up, {"python/sglang/added.py": base}, "v0.2.0")
    cat_dir = tmp_path / "catalog"
    _fix(cat_dir, "late", "python/sglang/added.py", base, base.replace("line 10\n", "line 10 fixed\n"))
    manifest = cat_dir / "manifests" / "late.toml"
    manifest.write_text(manifest.read_text().replace('"0.1.0"', '"0.2.0"'))
    cat, upstream = Catalog(cat_dir), UpstreamRepo(up)
    assert cat.get("late").upstream.base_release == "0.2.0"
    before = _snapshot(cat)

    report = rebase.start(cat, "0.1.0", ["late"], upstream=upstream)
    assert report.stopped == "late"
    detail = report.fixes[-1].patches[0].detail
    assert "0.1.0 has no python/sglang/added.py (added after 0.1.0: 0.2.0 has it)" in detail, detail
    assert "removed or renamed" not in detail
    with pytest.raises(UsageError) as exc:
        rebase.continue_(cat, upstream=upstream)
    said = exc.value.message
    assert "added after 0.1.0: 0.2.0 has it" in said and "removed or renamed" not in said, said
    assert "the variant for 0.1.0 leaves that change out" in said, said
    assert "marked upstream" not in said, said
    assert _snapshot(cat) == before


def test_a_backport_stop_and_its_skip_name_the_version_it_started_from(tmp_path) -> None:
    """A backport starts from the version nearest the release (the 0.2.0 variant, v1), and
    its stop said v1 while ``--skip`` and a bare ``rebase`` said the top level's v2, based on
    0.3.0: the same fix under two versions (a new-user trial). All three name v1 on 0.2.0."""
    up = tmp_path / "upstream"
    up.mkdir()
    _git(up, "init", "-q", "-b", "main")
    base = "".join(BODY)
    theirs = base.replace("line 10\n", "line 10 theirs\n")
    _write_release(up, {"python/sglang/sw.py": base}, "v0.1.0")
    _write_release(up, {"python/sglang/sw.py": theirs}, "v0.2.0")
    _write_release(up, {"python/sglang/sw.py": theirs + "line 41\n"}, "v0.3.0")
    cat_dir = tmp_path / "catalog"
    fixed = theirs.replace("line 10 theirs\n", "line 10 theirs fixed\n")
    _fix(cat_dir, "sw", "python/sglang/sw.py", theirs, fixed)
    top = cat_dir / "patches" / "sw" / "0001-sw.patch"
    (cat_dir / "patches" / "sw" / "0.2.0").mkdir()
    (cat_dir / "patches" / "sw" / "0.2.0" / "0001-sw.patch").write_bytes(top.read_bytes())
    manifest = cat_dir / "manifests" / "sw.toml"
    manifest.write_text(manifest.read_text().replace('"0.1.0"', '"0.3.0"')
                        .replace("version = 1 ", "version = 2 ", 1)
                        + '\n[[changelog]]\nversion = 2\ndate = "2026-01-02"\n'
                          'base_release = "0.3.0"\nsummary = "Rebased from 0.2.0 onto 0.3.0."\n'
                        + '\n[[variants]]\nversion = 1\nbase_release = "0.2.0"\n'
                          'releases = ["0.2.0"]\n\n[[variants.patches]]\nfile = "0001-sw.patch"\n'
                          'root = "sglang"\n')
    cat, upstream = Catalog(cat_dir), UpstreamRepo(up)
    assert cat.get("sw").version == 2

    stopped = rebase.start(cat, "0.1.0", ["sw"], upstream=upstream)
    assert stopped.stopped == "sw"
    current = rebase.current(cat)
    assert current is not None
    skipped = rebase.skip(cat, upstream=upstream)
    assert skipped.done and skipped.fixes[-1].outcome == "skipped"
    said = [(r.fixes[-1].old_version, r.fixes[-1].new_version, r.fixes[-1].from_release)
            for r in (stopped, current, skipped)]
    assert said == [(1, 1, "0.2.0")] * 3, said


def test_a_release_without_a_file_the_fix_changes_is_refused_at_continue(tmp_path, monkeypatch
                                                                          ) -> None:
    """0.2.0 removed python/sglang/gone.py, which the fix changes: the rebase stopped as a
    conflict with no markers in the worktree, and an unedited --continue wrote a version whose
    patch creates the whole file (a new-user trial). The stop names the missing file, and
    --continue refuses (exit 2, the rebase stays stopped, the catalog as it was) saying what
    to do; a worktree file deleted means the change is dropped there, and --continue goes on."""
    up = tmp_path / "upstream"
    up.mkdir()
    _git(up, "init", "-q", "-b", "main")
    base = "".join(BODY)
    _write_release(up, {"python/sglang/gone.py": base, "python/sglang/kept.py": base}, "v0.1.0")
    _git(up, "rm", "-q", "python/sglang/gone.py")
    _write_release(up, {"python/sglang/kept.py": base + "line 41\n"}, "v0.2.0")
    cat_dir = tmp_path / "catalog"
    _fix(cat_dir, "gone", "python/sglang/gone.py", base, base.replace("line 10\n", "line 10 fixed\n"))
    _git(cat_dir, "init", "-q", "-b", "main")
    _git(cat_dir, "add", "-A")
    _git(cat_dir, "commit", "-q", "-m", "catalog v1")
    cat, upstream = Catalog(cat_dir), UpstreamRepo(up)
    before = _snapshot(cat)

    report = rebase.start(cat, "0.2.0", ["gone"], upstream=upstream)
    assert report.stopped == "gone" and report.conflicted == ("python/sglang/gone.py",)
    stopped = report.fixes[-1].patches[0]
    assert stopped.classification == "conflict"
    assert "0.2.0 has no python/sglang/gone.py" in stopped.detail, stopped.detail
    assert _snapshot(cat) == before
    state = (cat.root / rebase.STATE_DIR / "state.json").read_bytes()

    with pytest.raises(UsageError) as exc:
        rebase.continue_(cat, upstream=upstream)
    said = exc.value.message
    assert "python/sglang/gone.py" in said and "0.2.0 has no" in said, said
    assert "--skip" in said and "upstream" in said and "creates the whole file" in said, said
    assert exc.value.exit_code == 2
    assert _snapshot(cat) == before
    assert (cat.root / rebase.STATE_DIR / "state.json").read_bytes() == state  # still stopped

    from tests.test_remote import cli as boundary  # the CLI's error boundary: exit codes

    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(up))
    code, out, err = boundary(["--catalog", str(cat.root), "rebase", "--continue", "--json"])
    assert code == 2, out + err
    error = json.loads(out)["error"]
    assert error["type"] == "UsageError" and error["details"]["missing"] == ["python/sglang/gone.py"]
    assert _snapshot(cat) == before

    # the change is not needed where the code went: delete the worktree file, and go on
    (Path(report.worktree) / "python/sglang/gone.py").unlink()
    done = rebase.continue_(cat, upstream=upstream)
    assert done.done and [f.outcome for f in done.fixes] == ["upstreamed"], done.fixes
    after = _snapshot(cat)  # marked upstream since 0.2.0; its series, for 0.1.0, as it was
    assert {p for p in after if after[p] != before[p]} == {"manifests/gone.toml"}
    assert 'applied = "0.2.0"' in after["manifests/gone.toml"].decode()


def _verify_grep(cat: Catalog, name: str, pattern: str) -> None:
    manifest = cat.manifests_dir / f"{name}.toml"
    manifest.write_text(manifest.read_text() + f'\n[[verification]]\nkind = "grep"\n'
                        f'path = "python/sglang/{name}.py"\npattern = "{pattern}"\ncount = 1\n')
    _git(cat.root, "commit", "-qam", f"{name}: verify")
    cat.forget(name)


def test_a_rebased_version_that_fails_its_own_verification_is_said_so(world, monkeypatch) -> None:
    """A trial resolved a conflict keeping upstream's form of the line its grep verification
    looks for: `--continue` said `rebase done`, the new version could never be applied (every
    host's apply failed after writing) and nothing said so. The rebase asks the checks that
    read a file of the release with the new series applied, and names each that fails."""
    cat, up = world
    _verify_grep(cat, "clash", "line 10 fixed")
    _verify_grep(cat, "shift", "line 10 fixed")
    report = rebase.start(cat, "0.2.0", ["shift", "clash"], upstream=up)
    assert report.stopped == "clash"
    shift = next(f for f in report.fixes if f.name == "shift")
    assert shift.outcome == "rebased" and shift.unverified == ()  # it holds at the offset
    f = Path(report.worktree) / "python/sglang/clash.py"
    f.write_text("".join(BODY).replace("line 10\n", "line 10 theirs and fixed\n"))
    monkeypatch.chdir(cat.root)
    shown = CliRunner().invoke(cli, ["rebase", "--continue"], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.output.split())
    assert "warning: clash v2 fails its own verification on 0.2.0: grep 'line 10 fixed' in " \
           "sglang:python/sglang/clash.py: 0 matching lines (no line), expected 1" in said, said
    assert "update that [[verification]]" in said and "rebase done" in said
