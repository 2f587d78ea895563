"""The "already upstream" decisions of rebase and `upstream check` (issue 23), each on a small
real git history: a merge equal to the release, a revert in the clone's range, both
directions applying, code removed after it landed, a base release that cannot be had."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit import api
from patchkit.rebase import contains
from patchkit.catalog import Catalog, edit, series
from patchkit.cli.main import cli
from patchkit.errors import CheckFailed
from patchkit.targets import LocalTarget
from patchkit.upstream import UpstreamRepo

BODY = "".join(f"line {i}\n" for i in range(1, 41))
HELPER = "def helper_for_the_fix():\n    return compute_the_value(1)\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def _commit(repo: Path, text: str, message: str, tag: str | None = None) -> str:
    f = repo / "python/sglang/mod.py"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    if tag:
        _git(repo, "tag", tag)
    return _git(repo, "rev-parse", "HEAD").strip()


def _world(tmp_path: Path, before: str, after: str, *releases: tuple[str, str]
           ) -> tuple[Catalog, UpstreamRepo]:
    """An upstream clone with v0.1.0 (``before``) and each (tag, text) of ``releases``; a
    catalog whose one fix, ``fix``, changes ``before`` into ``after`` on 0.1.0."""
    up = tmp_path / "upstream"
    up.mkdir()
    _git(up, "init", "-q", "-b", "main")
    _git(up, "config", "user.name", "u")
    _git(up, "config", "user.email", "u@example.com")
    _commit(up, before, "release 0.1.0", "v0.1.0")
    for tag, text in releases:
        _commit(up, text, f"release {tag}", tag)
    cat = tmp_path / "catalog"
    (cat / "patches" / "fix").mkdir(parents=True)
    text = "From: t <t@example.com>\nSubject: [PATCH] the fix\n\n---\n"
    text += series.diff_files(before.encode(), after.encode(), "python/sglang/mod.py")
    (cat / "patches" / "fix" / "0001-fix.patch").write_text(text)
    (cat / "manifests").mkdir()
    (cat / "manifests" / "fix.toml").write_text(edit.new_manifest_text(
        "fix", "the fix", "0.1.0", [("0001-fix.patch", "sglang")], "Why.", date="2026-01-01"))
    _git(cat, "init", "-q", "-b", "main")
    _git(cat, "add", "-A")
    _git(cat, "-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-q", "-m", "v1")
    return Catalog(cat), UpstreamRepo(up)


def _rebase(cat: Catalog, up: UpstreamRepo, onto: str, *more: str):
    return CliRunner().invoke(cli, ["--catalog", str(cat.root), "rebase", "--all", "--onto", onto,
                                    "--repo", str(up.path), "--json", *more])


def _kind(res) -> str:
    data = json.loads(res.stdout)
    return data["fixes"][0]["patches"][-1]["classification"]


def test_a_clean_merge_equal_to_the_release_is_upstream_not_a_crash(tmp_path: Path) -> None:
    """Upstream made the fix's change and also changed its context: neither direction applies,
    git's merge gives the release's file; the real rebase used to exit 70."""
    after = BODY.replace("line 10\n", "line 10 fixed\n")
    release = after.replace("line 12\n", "line 12 upstream\n").replace("line 8\n", "line 8 u\n")
    cat, up = _world(tmp_path, BODY, after, ("v0.2.0", release))
    dry = _rebase(cat, up, "0.2.0", "--dry-run")
    assert dry.exit_code == 0 and _kind(dry) == "upstream", dry.output
    real = _rebase(cat, up, "0.2.0")
    assert real.exit_code == 0, real.output
    assert json.loads(real.stdout)["fixes"][0]["outcome"] == "upstreamed"


def test_a_patch_id_match_reverted_later_in_the_range_is_not_upstream(tmp_path: Path) -> None:
    after = BODY.replace("line 10\n", "line 10 fixed\n")
    cat, up = _world(tmp_path, BODY, after)
    sha = _commit(up.path, after, "the fix upstream (#1)")
    _commit(up.path, BODY, 'Revert "the fix upstream (#1)"', "v0.2.0")
    res = _rebase(cat, up, "0.2.0", "--dry-run")
    patch = json.loads(res.stdout)["fixes"][0]["patches"][-1]
    assert patch["classification"] == "reverted-upstream", res.output
    assert sha[:12] in patch["detail"]
    v = contains.check(cat, ["fix"], "0.2.0", upstream=up)[0]
    assert v.verdict == contains.REVERTED, v


def test_both_directions_applying_is_ambiguous_everywhere(tmp_path: Path) -> None:
    """The release already has the helper the fix adds, a few lines above where the fix puts
    it: applying it would write a second copy."""
    after = BODY.replace("line 20\n", "line 20\n" + HELPER)
    release = BODY.replace("line 17\n", "line 17\n" + HELPER)
    cat, up = _world(tmp_path, BODY, after, ("v0.2.0", release))
    dry = _rebase(cat, up, "0.2.0", "--dry-run")
    assert _kind(dry) == "ambiguous", dry.output
    real = _rebase(cat, up, "0.2.0")
    assert real.exit_code == 3 and _kind(real) == "ambiguous", real.output
    assert CliRunner().invoke(cli, ["--catalog", str(cat.root), "rebase", "--skip"]).exit_code == 0
    assert contains.check(cat, ["fix"], "0.2.0", upstream=up)[0].verdict == contains.AMBIGUOUS
    # apply refuses it as a precondition, names the file and line; --force applies
    tree = tmp_path / "tree"
    (tree / "python/sglang").mkdir(parents=True)
    (tree / "python/sglang/mod.py").write_text(release)
    (tree / "python/sglang/version.py").write_text('__version__ = "0.1.0"\n')
    with pytest.raises(CheckFailed, match=r"already in sglang:python/sglang/mod.py at line 18"):
        api.apply(cat, LocalTarget({"sglang": str(tree)}), ["fix"], git=False)
    assert (tree / "python/sglang/mod.py").read_text() == release
    api.apply(cat, LocalTarget({"sglang": str(tree)}), ["fix"], git=False, force=True)
    assert (tree / "python/sglang/mod.py").read_text().count(HELPER) == 2


def test_code_removed_after_it_landed_is_removed_upstream_not_offset(tmp_path: Path) -> None:
    after = BODY.replace("line 20\n", "line 20\n" + HELPER)
    cat, up = _world(tmp_path, BODY, after, ("v0.2.0", after), ("v0.3.0", BODY))
    res = _rebase(cat, up, "0.3.0", "--dry-run")
    assert _kind(res) == "removed-upstream", res.output
    assert "0.2.0" in json.loads(res.stdout)["fixes"][0]["patches"][-1]["detail"]
    v = contains.check(cat, ["fix"], "0.3.0", upstream=up)[0]
    assert v.verdict == contains.REMOVED, v


def test_check_covers_the_users_fixes_when_another_fix_cannot_be_checked(tmp_path: Path
                                                                          ) -> None:
    after = BODY.replace("line 10\n", "line 10 fixed\n")
    cat, up = _world(tmp_path, BODY, after, ("v0.2.0", after))
    other = (cat.root / "manifests" / "fix.toml").read_text().replace(
        'name = "fix"', 'name = "old"').replace('"0.1.0"', '"0.0.9"')
    (cat.root / "manifests" / "old.toml").write_text(other)
    (cat.root / "patches" / "old").mkdir()
    (cat.root / "patches" / "old" / "0001-fix.patch").write_bytes(
        (cat.root / "patches" / "fix" / "0001-fix.patch").read_bytes())
    res = CliRunner().invoke(cli, ["--catalog", str(cat.root), "upstream", "check", "--release",
                                   "0.2.0", "--repo", str(up.path), "--json"])
    assert res.exit_code == 0, res.output
    verdicts = {v["fix"]: v for v in json.loads(res.stdout)["fixes"]}
    assert verdicts["fix"]["verdict"] == "contained"
    assert verdicts["old"]["verdict"] == "not-checked"
    assert "0.0.9" in verdicts["old"]["detail"]


def test_continue_with_the_release_files_of_an_ambiguous_stop_is_upstream(tmp_path: Path
                                                                           ) -> None:
    """The worktree of an ambiguous stop holds the release's files: taking them as they are
    means the patch changes nothing there (it used to be written as an empty patch)."""
    after = BODY.replace("line 20\n", "line 20\n" + HELPER)
    release = BODY.replace("line 17\n", "line 17\n" + HELPER)
    cat, up = _world(tmp_path, BODY, after, ("v0.2.0", release))
    before = (cat.root / "patches" / "fix" / "0001-fix.patch").read_bytes()
    assert _rebase(cat, up, "0.2.0").exit_code == 3
    res = CliRunner().invoke(cli, ["--catalog", str(cat.root), "rebase", "--continue", "--json"])
    assert res.exit_code == 0, res.output
    fix = json.loads(res.stdout)["fixes"][0]
    assert fix["outcome"] == "upstreamed" and fix["patches"][-1]["classification"] == "upstream"
    assert (cat.root / "patches" / "fix" / "0001-fix.patch").read_bytes() == before
