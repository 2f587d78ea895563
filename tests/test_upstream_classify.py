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


def _refused(tmp_path: Path, before: str, after: str) -> bool:
    """Whether ``apply`` refuses the fix ``before`` -> ``after`` on ``before`` as a second copy."""
    tmp_path.mkdir(exist_ok=True)
    cat, _up = _world(tmp_path, before, after)
    tree = tmp_path / "tree"
    (tree / "python/sglang").mkdir(parents=True)
    (tree / "python/sglang/mod.py").write_text(before)
    (tree / "python/sglang/version.py").write_text('__version__ = "0.1.0"\n')
    try:
        api.apply(cat, LocalTarget({"sglang": str(tree)}), ["fix"], git=False)
    except CheckFailed as exc:
        assert "would write a second copy" in str(exc)
        assert (tree / "python/sglang/mod.py").read_text() == before
        return True
    assert (tree / "python/sglang/mod.py").read_text() == after
    return False


def test_a_line_added_beside_its_twin_is_not_a_second_copy(tmp_path: Path) -> None:
    """Real code repeats single lines (a keyword passed on to two calls ten lines apart);
    upstream's own 0.5.22 -> 0.5.23 diff adds such lines (lora_moe_runners.py, model_config.py).
    One line ten lines off is not the fix already there."""
    arg = "            adapter_enabled=lora_info.adapter_enabled,\n"
    before = "".join(f"line {i}\n" for i in range(1, 30)).replace("line 5\n", "line 5\n" + arg)
    after = before.replace("line 15\n", "line 15\n" + arg)
    assert not _refused(tmp_path, before, after)


def test_a_hunk_is_a_second_copy_only_when_all_it_adds_is_there(tmp_path: Path) -> None:
    """Of a hunk's two added blocks, one standing nearby proves nothing; both do."""
    one = "    x = compute(a, b)\n    y = compute(b, a)\n"
    two = "    z = combine(x, y)\n    w = combine(y, x)\n"
    base = "".join(f"line {i}\n" for i in range(1, 30))
    before = base.replace("line 8\n", "line 8\n" + one)
    after = before.replace("line 14\nline 15\n", "line 14\n" + one + "line 15\n" + two)
    assert not _refused(tmp_path / "one", before, after)
    before = base.replace("line 8\n", "line 8\n" + one + two)
    after = before.replace("line 14\nline 15\n", "line 14\n" + one + "line 15\n" + two)
    assert _refused(tmp_path / "both", before, after)


def test_upstreams_own_diff_writes_no_second_copy(catalog_upstream: UpstreamRepo) -> None:
    """Every file SGLang 0.5.23 changed, as a patch on 0.5.21's file: none is refused as
    already there (0.5.21 does not hold 0.5.23's changes). The rule once refused 11 hunks of
    such a diff, for lines that upstream adds beside their twins."""
    from patchkit.engine import presence
    from patchkit.engine.hunks import FileChange, decode

    def git(*args: str) -> bytes:
        return subprocess.run(["git", f"--git-dir={catalog_upstream.git_dir}", *args],
                              capture_output=True, check=True).stdout

    diff = git("diff", "--no-renames", "v0.5.21", "v0.5.23", "--", "python/sglang/srt")
    parts = diff.split(b"\ndiff --git ")
    checked, refused = 0, []
    for i, part in enumerate(parts):
        chunk = part if i == 0 else b"diff --git " + part
        for rec in series.parse_patch(f"{i}.patch", "sglang", chunk + b"\n"):
            if rec["op"] != "modify" or rec["path"].endswith((".so", ".bin")):
                continue
            change = FileChange.from_dict(rec, "drift")
            old = decode(git("show", f"v0.5.21:{rec['path']}"))
            checked += 1
            if presence.duplicates(old, change) is not None:
                refused.append(rec["path"])
    assert checked > 100 and refused == []
