"""One catalog for every release (docs/manifest.md, "[[variants]]"): the shipped catalog's
0.5.22 and 0.5.23 variants chosen by the engine from the release each target runs, on real
checkouts and a real pip-installed wheel; sync after an upgrade underneath; a fix marked
upstream; rebase keeping old variants; and the fixes x releases matrix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from patchkit import api, rebase
from patchkit.catalog import Catalog, edit
from patchkit.catalog.manifest import load_manifest
from patchkit.catalog.edit import new_manifest_text
from patchkit.errors import ManifestError, PreconditionFailed
from patchkit.targets import LocalTarget, resolve_target
from patchkit.upstream import UpstreamRepo
from tests.fixtures.sglang import checkout

pytestmark = pytest.mark.network  # the real wheels come from the registry once

REPO = Path(__file__).resolve().parent.parent
INDEX_K, SIZING = "dsv4-bf16-index-k", "dsv4-bf16-sizing"


def copy_catalog(dest: Path) -> Catalog:
    for part in ("manifests", "patches"):
        shutil.copytree(REPO / part, dest / part)
    return Catalog.open(dest)


def local(tree: Path) -> LocalTarget:
    return LocalTarget({"sglang": str(tree)}, sys.executable, str(tree))


def states(catalog: Catalog, target: LocalTarget) -> dict[str, tuple[str, int | None]]:
    return {s.name: (s.state, s.version) for s in api.status(catalog, target).status}


# -- the manifest format --------------------------------------------------------------------


def _variant_manifest(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "patches" / "f" / "0.5.22").mkdir(parents=True)
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    (tmp_path / "patches" / "f" / "0001-x.patch").write_text(patch)
    (tmp_path / "patches" / "f" / "0.5.22" / "0001-x.patch").write_text(patch)
    text = new_manifest_text("f", "t", "0.5.23", [("0001-x.patch", "sglang")], "why",
                             date="2026-11-01").replace("version = 1 ", "version = 2 ", 1)
    text = text.replace('summary = "First version."', 'summary = "First version."\n\n'
                        '[[changelog]]\nversion = 2\ndate = "2026-11-02"\nsummary = "0.5.23"')
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "f.toml"
    path.write_text(text + extra)
    return path


VARIANT = '\n[[variants]]\nversion = 1\nbase_release = "0.5.22"\n\n[[variants.patches]]\nfile = "0001-x.patch"\n'


def test_a_variant_is_read_with_its_own_series_and_the_top_level_checks(tmp_path: Path) -> None:
    fix = load_manifest(_variant_manifest(tmp_path, VARIANT))
    (v,) = fix.variants
    assert (v.version, v.releases, v.dir) == (1, ("0.5.22",), "0.5.22")
    assert v.patches[0].path == tmp_path / "patches" / "f" / "0.5.22" / "0001-x.patch"
    assert fix.variant_for("0.5.22").version == 1 and fix.variant_for("0.5.23").version == 2
    assert fix.variant_for("0.5.21") is None


def test_a_refreshed_variant_may_be_the_newest_version(tmp_path: Path) -> None:
    """A variant refreshed after the top level (a bug fixed in 0.5.22's series) is the fix's
    newest version: it loads, its changelog entry with it, and the next version is above it."""
    extra = VARIANT.replace("version = 1", "version = 3") + (
        '\n[[changelog]]\nversion = 3\ndate = "2026-11-03"\nbase_release = "0.5.22"\n'
        'summary = "0.5.22 fixed"\n')
    fix = load_manifest(_variant_manifest(tmp_path, extra))
    assert fix.version == 2 and fix.serves() == {"0.5.23": 2, "0.5.22": 3}
    assert fix.next_version == 4 and fix.changelog[-1].version == 3


@pytest.mark.parametrize("extra, key, said", [
    (VARIANT.replace('"0.5.22"', '"0.5.23"'), "variants[1].releases", "served by the top level"),
    (VARIANT.replace("version = 1", "version = 2"), "variants[1].version", "already used"),
    (VARIANT.replace("version = 1", "version = 0"), "variants[1].version", "not a version"),
    (VARIANT.replace('file = "0001-x.patch"', 'file = "0002-y.patch"'),
     "variants[1].patches[1].file", "does not exist"),
    (VARIANT.replace("base_release", "base_relase"), "variants[1].base_relase", "unknown key"),
])
def test_a_bad_variant_is_refused_naming_the_file_and_key(tmp_path: Path, extra: str, key: str,
                                                          said: str) -> None:
    path = _variant_manifest(tmp_path, extra)
    before = path.read_bytes()
    with pytest.raises(ManifestError) as exc:
        load_manifest(path)
    assert exc.value.details["key"] == key and said in exc.value.message
    assert str(path) in exc.value.message and path.read_bytes() == before
    # the line is the variant's (it was the top level's key of that name: line 3, 37, 43)
    lines = path.read_text().splitlines()
    variant = lines.index("[[variants]]") + 1
    line = exc.value.details["line"]
    assert line >= variant and f"{path}:{line}:" in exc.value.message, (line, variant)
    wanted = key.rsplit(".", 1)[-1]
    assert lines[line - 1].startswith(wanted) or (
        line == variant and not any(t.startswith(wanted) for t in lines[variant:])), lines[line - 1]


# -- selection on real releases ---------------------------------------------------------------


def test_one_catalog_commit_applies_each_release_its_variant(three_releases: UpstreamRepo,
                                                             tmp_path: Path) -> None:
    catalog = Catalog(REPO)
    for release, version in (("0.5.22", 3), ("0.5.23", 4)):
        tree = checkout(three_releases, release, tmp_path / release)
        result = api.sync(catalog, local(tree))
        applied = {f.name: (f.outcome, f.version) for f in result.fixes}
        assert applied[INDEX_K] == ("applied", version) and applied[SIZING] == ("applied", version)
        # a revert with nothing to revert is left alone, not refused
        assert applied["revert-hicache-index-k-sync"][0] == "not-needed"
        assert states(catalog, local(tree))[INDEX_K] == ("applied", version)
        assert api.sync(catalog, local(tree)).fixes[0].outcome == "already-applied"
    # a release no variant serves: the precondition names the variants there are
    old = checkout(three_releases, "0.5.21", tmp_path / "0.5.21")
    with pytest.raises(PreconditionFailed) as exc:
        api.apply(catalog, local(old), [INDEX_K])
    assert "variants exist for 0.5.23 (v4), 0.5.22 (v3)" in exc.value.message
    assert "patchkit rebase dsv4-bf16-index-k --onto 0.5.21" in exc.value.message
    # the check's name is every release a version serves (it named the top level's alone)
    assert "release is one of 0.5.23, 0.5.22" in exc.value.message, exc.value.message
    # status says why the fix is not applied there, naming what serves which release
    seen = {s.name: s for s in api.status(catalog, local(old)).status}[INDEX_K]
    assert seen.state == "not-applied" and seen.detail == (
        "no version of the fix serves 0.5.21 (v4 for 0.5.23, v3 for 0.5.22): its change was "
        "not looked for there; make one with patchkit rebase dsv4-bf16-index-k --onto 0.5.21")
    # from a catalog of the user's own (patchkit init), where the fix is the shipped one, whose
    # rebase is refused: the advice is the way that works (a new-user trial)
    from patchkit.authoring import init_catalog

    init_catalog(tmp_path / "mine", git=False)
    mine = Catalog.open(tmp_path / "mine")
    steps = (f"make one in a catalog of your own, as {INDEX_K} is shipped with patchkit, whose "
             f"catalog is never written to: patchkit init DIR; cp {REPO}/manifests/{INDEX_K}.toml "
             f"DIR/manifests/; cp -r {REPO}/patches/{INDEX_K} DIR/patches/ (yours then replaces "
             f"the shipped one); in DIR, patchkit rebase {INDEX_K} --onto 0.5.21")
    with pytest.raises(PreconditionFailed) as exc:
        api.apply(mine, local(old), [INDEX_K])
    assert steps[1:] in exc.value.message, exc.value.message
    seen = {s.name: s for s in api.status(mine, local(old)).status}[INDEX_K]
    assert seen.detail.endswith(steps), seen.detail
    # followed, the copy is the fix whole (its checks, variants and restart: an export and
    # import, advised before, dropped them), yours, and its rebase starts
    import shutil as _sh
    _sh.copy(REPO / "manifests" / f"{INDEX_K}.toml", tmp_path / "mine" / "manifests")
    _sh.copytree(REPO / "patches" / INDEX_K, tmp_path / "mine" / "patches" / INDEX_K)
    copied, shipped = Catalog.open(tmp_path / "mine"), Catalog(REPO)
    assert not copied.shipped(INDEX_K)
    assert (copied.get(INDEX_K).verification, copied.get(INDEX_K).serves()) == (
        shipped.get(INDEX_K).verification, shipped.get(INDEX_K).serves())


def test_a_revert_with_nothing_to_revert_on_an_unserved_release_is_not_needed_everywhere(
        three_releases: UpstreamRepo, sglang_wheel_0521: Path, tmp_path: Path) -> None:
    """0.5.21, which no version of the revert fix or of the dead fix it reverts serves: a
    checkout of it says the revert is not-needed (the dead commit is not in its history),
    and so must the same release installed from its wheel, and the checkout's files without
    git. Outside git the engine read the files with the 0.5.23 series, which half matches
    0.5.21's by chance, and called the revert `not-applied: no version of the fix serves
    0.5.21`, asking for a rebase of a revert with nothing to revert (a new-user trial)."""
    import zipfile

    revert = "revert-hicache-index-k-sync"
    catalog = Catalog(REPO)
    tree = checkout(three_releases, "0.5.21", tmp_path / "checkout")
    bare = tmp_path / "no-git"
    shutil.copytree(tree, bare, ignore=shutil.ignore_patterns(".git"))
    site = tmp_path / "site"  # the wheel's files as pip writes them (its RECORD the proof)
    with zipfile.ZipFile(sglang_wheel_0521) as wheel:
        wheel.extractall(site, [n for n in wheel.namelist() if n.startswith("sglang")])
    for where in (tree, bare, site):
        result = api.status(catalog, local(where))
        assert result.release == "0.5.21", where
        seen = {s.name: s for s in result.status}[revert]
        assert seen.state == "not-needed", (where, seen)
        # and says why, on a checkout too (its detail was null there)
        assert (seen.detail or "").startswith("nothing to revert on this target: "), (where, seen)
    assert result.raw["installed"] == {"sglang": {"dist": "sglang", "version": "0.5.21"}}


def test_a_fix_upstream_in_0523_is_not_applied_there_and_stays_on_0522(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    catalog = copy_catalog(tmp_path / "cat")
    assert edit.set_upstream(catalog.manifest_path(INDEX_K), "0.5.23")
    catalog = Catalog.open(tmp_path / "cat")
    new = local(checkout(three_releases, "0.5.23", tmp_path / "new"))
    old = local(checkout(three_releases, "0.5.22", tmp_path / "old"))
    assert [(f.outcome, f.detail) for f in api.apply(catalog, new, [INDEX_K]).fixes] == [
        ("not-needed", "in upstream since 0.5.23 (the target runs 0.5.23)")]
    assert not (Path(new.roots["sglang"]) / ".patchkit" / "state.json").exists()
    seen = {s.name: s for s in api.status(catalog, new).status}[INDEX_K]
    assert seen.state == "not-needed" and "in upstream since 0.5.23" in seen.detail
    assert api.apply(catalog, old, [INDEX_K]).fixes[0].outcome == "applied"
    assert states(catalog, old)[INDEX_K] == ("applied", 3)


def _took(releases: UpstreamRepo, cat: Path, base: str = "0.5.21", onto: str = "0.5.22"
          ) -> tuple[str, Callable[[str], bytes]]:
    """A catalog at ``cat`` of one fix, ``took``, on ``base``: SGLang's own ``base`` -> ``onto``
    change to the .py file it changed least; that file's path and its bytes at a tag."""
    from patchkit.catalog.series import diff_files

    git_dir = str(releases.git_dir)
    rows = subprocess.run(["git", "--git-dir", git_dir, "diff", "--numstat", "--diff-filter=M",
                           f"v{base}", f"v{onto}", "--", "python/sglang/srt"], check=True,
                          capture_output=True, text=True).stdout.splitlines()
    rel = min((int(a) + int(r), p) for a, r, p in (row.split("\t") for row in rows)
              if p.endswith(".py") and a != "-")[1]

    def blob(tag: str) -> bytes:
        return subprocess.run(["git", "--git-dir", git_dir, "show", f"{tag}:{rel}"], check=True,
                              capture_output=True).stdout

    (cat / "patches" / "took").mkdir(parents=True)
    (cat / "patches" / "took" / "0001-took.patch").write_text(
        diff_files(blob(f"v{base}"), blob(f"v{onto}"), rel))
    (cat / "manifests").mkdir()
    (cat / "manifests" / "took.toml").write_text(new_manifest_text(
        "took", f"what {onto} took", base, [("0001-took.patch", "sglang")], "why",
        date="2026-11-01"))
    return rel, blob


def test_a_host_upgraded_to_the_release_that_took_its_fix_is_told_so_and_sync_forgets_it(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A fix that is SGLang's own 0.5.21 -> 0.5.22 change to a file, applied on 0.5.21 and
    marked upstream since 0.5.22; the host then moves to 0.5.22, whose file is what the fix
    wrote, so the record stays intact. It said `applied: no version of the fix serves
    0.5.22 ...; make one with patchkit rebase` (which finds it upstream and writes nothing),
    sync said `already-applied`, and rollback would have written 0.5.21's bytes into 0.5.22.
    Now: status says not needed and that sync forgets the record; rollback refuses (the
    release's own change); sync forgets the record, writing nothing."""
    from patchkit.errors import PreconditionFailed

    cat = tmp_path / "cat"
    rel, blob = _took(three_releases, cat)
    tree = checkout(three_releases, "0.5.21", tmp_path / "t")
    assert api.apply(Catalog.open(cat), local(tree), ["took"]).fixes[0].outcome == "applied"
    assert edit.set_upstream(cat / "manifests" / "took.toml", "0.5.22")
    _git(tree, "reset", "-q", "--hard", "v0.5.22")
    assert (tree / rel).read_bytes() == blob("v0.5.22")
    catalog = Catalog.open(cat)
    seen = {s.name: s for s in api.status(catalog, local(tree)).status}["took"]
    assert seen.state == "not-needed", (seen.state, seen.detail)
    assert "in upstream since 0.5.22" in seen.detail and "patchkit sync" in seen.detail
    assert "rebase" not in seen.detail
    with pytest.raises(PreconditionFailed, match="in upstream since 0.5.22") as refused:
        api.rollback(catalog, local(tree), ["took"])
    assert "patchkit sync" in str(refused.value)
    assert (tree / rel).read_bytes() == blob("v0.5.22")
    state = tree / ".patchkit" / "state.json"
    dry = api.sync(catalog, local(tree), dry_run=True)
    assert [(f.outcome, "would be forgotten" in (f.detail or "")) for f in dry.fixes
            if f.name == "took"] == [("not-needed", True)]
    assert "took" in state.read_text()
    done = {f.name: f for f in api.sync(catalog, local(tree)).fixes}["took"]
    assert done.outcome == "not-needed" and "forgotten" in (done.detail or ""), done
    assert "took" not in json.dumps(json.loads(state.read_text())["fixes"])
    assert _git(tree, "status", "--porcelain", "--", "python") == ""
    assert states(catalog, local(tree))["took"] == ("not-needed", 1)
    # verify agrees with status: not needed there, nothing to verify (it said present-
    # unrecorded, "a commit of the fork, or applied by hand", exit 1)
    checked = api.verify(catalog, local(tree), ["took"])
    assert [(f.outcome, f.detail) for f in checked.fixes] == [
        ("not-needed", "in upstream since 0.5.22 (the target runs 0.5.22)")]


def test_a_rebase_onto_a_later_release_leaves_an_upstream_mark_as_it_is(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A fix marked upstream since 0.5.22, rebased with the rest onto 0.5.23: the rebase found
    it upstream again and moved the mark to 0.5.23, so hosts on 0.5.22 needed it again. It is
    not needed on 0.5.23 already, so nothing is rebased, and the mark stays."""
    cat = tmp_path / "cat"
    _took(three_releases, cat)
    assert edit.set_upstream(cat / "manifests" / "took.toml", "0.5.22")
    before = (cat / "manifests" / "took.toml").read_bytes()
    report = rebase.start(Catalog.open(cat), "0.5.23", upstream=three_releases)
    [took] = report.fixes
    assert took.outcome == "skipped" and "in upstream since 0.5.22" in took.detail, took
    assert (cat / "manifests" / "took.toml").read_bytes() == before


# -- an installed package upgraded underneath ---------------------------------------------------


def _pip(python: Path, wheel: Path) -> None:
    """pip installs ``wheel`` into ``python``'s environment (this venv's pip, ``--python``: the
    environment needs no pip of its own, whose install cost more than the test's work)."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-compile", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=600)


def test_sync_brings_an_installed_package_back_after_pip_upgrades_it(
        tmp_path: Path, sglang_wheels: Path, sglang_wheel_0523: Path) -> None:
    from patchkit.upstream import download_wheel

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    _pip(python, download_wheel("0.5.22", sglang_wheels))
    catalog, target = Catalog(REPO), resolve_target(f"python:{python}", [])
    assert {f.name: f.version for f in api.sync(catalog, target).fixes
            if f.outcome == "applied"} == {INDEX_K: 3, SIZING: 3}

    _pip(python, sglang_wheel_0523)  # the image is rebuilt on the next release, say
    assert states(catalog, target)[INDEX_K][0] == "lost"
    planned = api.sync(catalog, target, dry_run=True)
    assert {f.name: f.outcome for f in planned.fixes if f.name in (INDEX_K, SIZING)} == {
        INDEX_K: "would-apply", SIZING: "would-apply"}
    result = api.sync(catalog, target)
    assert {f.name: (f.outcome, f.version) for f in result.fixes if f.name in (INDEX_K, SIZING)} \
        == {INDEX_K: ("applied", 4), SIZING: ("applied", 4)}
    assert all(f.lost for f in result.fixes if f.name in (INDEX_K, SIZING))
    assert states(catalog, target)[SIZING] == ("applied", 4)


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True,
                          text=True).stdout


def test_a_checkout_moved_to_another_release_by_git_is_lost_and_never_gets_the_old_bytes(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """The checkout's upgrade is git's (`git reset --hard v0.5.23`, as a stash and a checkout
    would do): the 0.5.22 variants' files are 0.5.23's now. They were `drifted`, sync refused,
    and the advised `rollback --force` wrote 0.5.22's bytes into the 0.5.23 tree with every
    command saying all was well after. As for a pip upgrade: the fixes are lost, rolling them
    back only forgets them, and sync applies the 0.5.23 variants."""
    catalog = Catalog(REPO)
    tree = checkout(three_releases, "0.5.22", tmp_path / "t")
    assert {f.name: f.version for f in api.sync(catalog, local(tree)).fixes
            if f.outcome == "applied"} == {INDEX_K: 3, SIZING: 3}
    _git(tree, "reset", "-q", "--hard", "v0.5.23")
    moved = _git(tree, "diff", "--name-only", "--diff-filter=d", "v0.5.22", "v0.5.23", "--",
                 "python/*.py").splitlines()
    release = {tree / p: (tree / p).read_bytes() for p in moved}
    assert len(release) > 100
    seen = {s.name: s for s in api.status(catalog, local(tree)).status}
    assert (seen[INDEX_K].state, seen[SIZING].state) == ("lost", "lost"), seen[INDEX_K]
    assert "0.5.22 -> 0.5.23" in seen[INDEX_K].detail, seen[INDEX_K].detail
    assert {p: p.read_bytes() for p in release} == release  # status wrote nothing

    result = api.sync(catalog, local(tree))
    assert {f.name: (f.outcome, f.version) for f in result.fixes
            if f.name in (INDEX_K, SIZING)} == {INDEX_K: ("applied", 4), SIZING: ("applied", 4)}
    assert all("0.5.22 -> 0.5.23" in (f.lost or "") for f in result.fixes
               if f.name in (INDEX_K, SIZING))
    # why it was lost, not the advice to apply it again, which this apply just followed
    assert not any("again" in (f.lost or "") for f in result.fixes), result.fixes
    assert states(catalog, local(tree))[INDEX_K] == ("applied", 4)

    # back to 0.5.22, and a file edited by hand after the move: still lost (the backups are
    # 0.5.23's bytes), the edit shown as drift and kept; rollback --force wrote the old
    # release's bytes over the files git had replaced
    _git(tree, "reset", "-q", "--hard", "v0.5.22")
    seen = {s.name: s for s in api.status(catalog, local(tree)).status}[INDEX_K]
    edited = tree / seen.files[0]["path"]
    edited.write_bytes(edited.read_bytes() + b"# edited on the host\n")
    seen = {s.name: s for s in api.status(catalog, local(tree)).status}[INDEX_K]
    assert seen.state == "lost" and "1 file(s) edited since, kept as they are" in seen.detail
    assert {f["path"]: f["state"] for f in seen.files}[seen.files[0]["path"]] == "drifted"
    assert {f["state"] for f in seen.files[1:]} <= {"replaced", "ok"}
    done = api.rollback(catalog, local(tree), [INDEX_K, SIZING], force=True)
    assert all(f.outcome == "rolled-back" and not f.files for f in done.fixes), done.fixes
    changed = _git(tree, "status", "--porcelain", "--", "python").splitlines()
    assert changed == [f" M {seen.files[0]['path']}"], changed  # the edit, and nothing of 0.5.23
    assert edited.read_bytes().endswith(b"# edited on the host\n")


def test_a_failed_health_check_after_sync_leaves_the_lost_fixes_lost(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """sync applied the lost fixes' new variants, the health check failed, and the undo was a
    rollback of them: the files were back, but the lost records were gone, so status said
    not-applied and `status --exit-code` passed on a server running none of its fixes."""
    from tests.test_remote import cli

    catalog = Catalog(REPO)
    tree = checkout(three_releases, "0.5.22", tmp_path / "t")
    api.sync(catalog, local(tree))
    _git(tree, "reset", "-q", "--hard", "v0.5.23")
    before = states(catalog, local(tree))
    assert before[INDEX_K] == ("lost", 3)
    code, out, err = cli(["sync", "--target", str(tree), "--health-cmd", "exit 3", "--json"])
    assert code == 1, out + err
    undone = {f["name"]: f for f in json.loads(out)["fixes"]}[INDEX_K]
    assert (undone["outcome"], undone["undid"]) == ("undone", "applied")
    assert states(catalog, local(tree)) == before  # lost again, v3's records kept
    assert _git(tree, "status", "--porcelain", "--", "python") == ""  # 0.5.23's files
    assert cli(["status", "--target", str(tree), "--exit-code"])[0] == 1


def test_an_undo_of_the_sync_that_applied_lost_fixes_says_they_go_back_to_lost(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """`undo --dry-run` after a sync that applied lost fixes afresh said only "its record and
    files would be put back as they were (v3)", as if v3 would be in place again; it is lost
    again, and now says so."""
    from tests.test_remote import cli

    catalog = Catalog(REPO)
    tree = checkout(three_releases, "0.5.22", tmp_path / "t")
    api.sync(catalog, local(tree))
    _git(tree, "reset", "-q", "--hard", "v0.5.23")
    assert states(catalog, local(tree))[INDEX_K] == ("lost", 3)
    assert api.sync(catalog, local(tree)).ok
    code, out, err = cli(["undo", "--target", str(tree), "--dry-run", "--json"])
    assert code == 0, out + err
    fixes = {f["name"]: f for f in json.loads(out)["fixes"]}
    assert "did not hold v3's change then, and would not: lost or drifted" in fixes[INDEX_K]["detail"]
    assert fixes[INDEX_K]["not_holding"] is True
    # a fleet's undo says the same in its change (it said "v4 -> v3", a trial)
    from patchkit.fleet.rollout import _change
    assert _change(fixes[INDEX_K]) == f"{INDEX_K} v4 -> v3 (its record: lost or drifted)"
    assert cli(["undo", "--target", str(tree)])[0] == 0
    assert states(catalog, local(tree))[INDEX_K] == ("lost", 3)


# -- rebase adds a variant ----------------------------------------------------------------------


def test_rebase_onto_a_release_keeps_the_old_versions_as_variants(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A fix written on 0.5.22 whose hunk 0.5.23 moves: rebased, its 0.5.22 series stays a
    variant, and each release still gets its own; --drop-old then retires it."""
    tree = checkout(three_releases, "0.5.22", tmp_path / "t")
    rel = "python/sglang/srt/environ.py"
    lines = (tree / rel).read_text().splitlines(keepends=True)
    # below the switches 0.5.23 inserts after this one: the same lines, further down
    at = next(i for i, line in enumerate(lines) if "SGLANG_DSV4_UNIFIED_KV_FP8 = " in line) + 60
    hunk = "".join(lines[at - 3:at + 4])
    new = hunk.replace(lines[at], lines[at] + "    SGLANG_TEST_SWITCH = EnvBool(False)\n")
    patch = (f"--- a/{rel}\n+++ b/{rel}\n@@ -{at - 2},7 +{at - 2},8 @@\n"
             + "".join(" " + x for x in hunk.splitlines(keepends=True)).replace(
                 " " + lines[at], " " + lines[at] + "+    SGLANG_TEST_SWITCH = EnvBool(False)\n"))
    assert new != hunk
    cat = tmp_path / "cat"
    (cat / "patches" / "sw").mkdir(parents=True)
    (cat / "patches" / "sw" / "0001-sw.patch").write_text(patch)
    (cat / "manifests").mkdir()
    (cat / "manifests" / "sw.toml").write_text(new_manifest_text(
        "sw", "a switch", "0.5.22", [("0001-sw.patch", "sglang")], "why", date="2026-11-01"))
    catalog = Catalog.open(cat)
    report = rebase.start(catalog, "0.5.23", upstream=three_releases)
    assert [f.outcome for f in report.fixes] == ["rebased"]
    fix = Catalog.open(cat).get("sw")
    assert (fix.version, fix.upstream.releases) == (2, ("0.5.23",))
    assert [(v.version, v.releases) for v in fix.variants] == [(1, ("0.5.22",))]
    assert (cat / "patches" / "sw" / "0.5.22" / "0001-sw.patch").read_text() == patch
    for release, version in (("0.5.22", 1), ("0.5.23", 2)):
        t = tree if release == "0.5.22" else checkout(three_releases, release, tmp_path / release)
        assert api.apply(Catalog.open(cat), local(t), ["sw"]).fixes[0].version == version

    # --drop-old onto the release the fix is already based on moves nothing: it says which
    # variants it kept (it said only "already based on 0.5.23", and the docs' retire step
    # was this command)
    kept = rebase.start(Catalog.open(cat), "0.5.23", upstream=three_releases, drop_old=True,
                        dry_run=True)
    [skipped] = kept.fixes
    assert "already based on 0.5.23; --drop-old kept its variants (v1 for 0.5.22)" in skipped.detail
    assert [(v.version, v.releases) for v in Catalog.open(cat).get("sw").variants] == [(1, ("0.5.22",))]

    rebase.start(Catalog.open(cat), "0.5.22", upstream=three_releases, drop_old=True)
    fix = Catalog.open(cat).get("sw")
    assert (fix.version, fix.upstream.releases, fix.variants) == (3, ("0.5.22",), ())
    assert not (cat / "patches" / "sw" / "0.5.22").exists()


# -- the matrix ---------------------------------------------------------------------------------


def test_matrix_over_three_releases_says_what_each_release_takes(
        three_releases: UpstreamRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped catalog on 0.5.21, which no variant serves, to 0.5.23: the dsv4 fixes need a
    rebase (a backport from their 0.5.22 variants); the revert fix, with nothing to revert on
    a release, is not needed there, as sync says (it was a conflict, failing --exit-code on
    the shipped catalog as it is: a new-user trial)."""
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(three_releases.path))
    argv = [sys.executable, "-m", "patchkit", "--catalog", str(REPO), "matrix",
            "--releases", "0.5.21..0.5.23"]
    proc = subprocess.run([*argv, "--json", "--exit-code"], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is True  # it ran: a failing cell is its answer, as a drifted fix is status's
    assert out["releases"] == ["0.5.21", "0.5.22", "0.5.23"]
    cells = {f: {r: c["label"] for r, c in row.items()} for f, row in out["cells"].items()}
    # on 0.5.21, older than every version, a rebase would start from the 0.5.22 variants
    # (docs/rebase.md, "Backports"): the index-K fix moves by an offset, the revert conflicts
    assert cells[INDEX_K] == {"0.5.21": "rebase needed", "0.5.22": "v3 (0.5.22)", "0.5.23": "v4 (0.5.23)"}
    assert "A rebase from 0.5.22 onto 0.5.21" in out["cells"][INDEX_K]["0.5.21"]["detail"]
    assert cells[SIZING]["0.5.22"] == "v3 (0.5.22)"
    assert {r: cells["revert-hicache-index-k-sync"][r] for r in ("0.5.21", "0.5.23")} == {
        "0.5.21": "not-needed", "0.5.23": "not-needed"}
    assert out["failing"] == []
    # messages name the user's catalog (here in git, its old versions readable), never a copy
    assert "patchkit-matrix-" not in proc.stdout and "patchkit-rebase-" not in proc.stdout
    served = subprocess.run([*argv[:-1], "0.5.22,0.5.23", "--markdown", "--exit-code"],
                            capture_output=True, text=True, timeout=900)
    assert served.returncode == 0, served.stderr
    assert f"| {INDEX_K} | v3 (0.5.22) | v4 (0.5.23) |" in served.stdout


def test_a_matrix_asks_each_later_release_whether_it_still_holds_a_fix_marked_upstream(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A fix on 0.5.21 that is a file 0.5.22 added and 0.5.23 removed, marked upstream since
    0.5.22: the matrix said `upstream` on 0.5.23 too ("every later release"), exit 0, while
    `upstream check --release 0.5.23` says removed upstream. The release watch now asks each
    release at or after the mark, and one that no longer holds the change fails."""
    from patchkit.catalog.series import diff_files
    from patchkit.matrix import matrix

    git_dir = Path(three_releases.git_dir)

    def names(*args: str) -> set[str]:
        return set(subprocess.run(["git", "--git-dir", str(git_dir), "diff", "--name-only", *args],
                                  check=True, capture_output=True, text=True).stdout.split())
    rel = min(p for p in names("--diff-filter=A", "v0.5.21", "v0.5.22")
              & names("--diff-filter=D", "v0.5.22", "v0.5.23") if p.endswith(".py"))
    added = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"v0.5.22:{rel}"],
                           check=True, capture_output=True).stdout
    cat = tmp_path / "cat"
    (cat / "patches" / "gone").mkdir(parents=True)
    (cat / "patches" / "gone" / "0001-gone.patch").write_text(diff_files(None, added, rel))
    (cat / "manifests").mkdir()
    (cat / "manifests" / "gone.toml").write_text(new_manifest_text(
        "gone", "a file 0.5.22 took and 0.5.23 dropped", "0.5.21", [("0001-gone.patch", "sglang")],
        "why", date="2026-11-01"))
    assert edit.set_upstream(cat / "manifests" / "gone.toml", "0.5.22")
    found = matrix(Catalog.open(cat), ["0.5.21", "0.5.22", "0.5.23"], ["gone"], upstream=three_releases)
    row = found.cells["gone"]
    assert (row["0.5.21"].label, row["0.5.22"].label) == ("v1 (0.5.21)", "upstream"), row
    assert row["0.5.22"].detail.startswith("marked upstream since 0.5.22")
    assert row["0.5.23"].label == "removed upstream", row["0.5.23"]
    assert "0.5.23 no longer holds the change" in row["0.5.23"].detail
    assert found.failing == [("gone", "0.5.23")]


def test_a_matrix_cell_blocked_by_its_dependency_says_so_in_plain_lines(
        three_releases: UpstreamRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On 0.5.21, which no variant serves, the dependency cannot be rebased (its 0.5.22
    variant, a context line edited here, which a backport starts from, does not apply to
    its own base) and, the catalog being outside git, its 0.5.21 version cannot be read; on
    0.5.22 that variant no longer applies. Either way the fix on it is blocked by it,
    not a conflict of its own, and the detail says why, naming the user's catalog. In a
    pipe: one plain line per fix and release, ``FIX RELEASE CELL DETAIL``, as status
    --inventory's matrix; the revert fix, which needs no dependency applied, is not blocked."""
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(three_releases.path))
    cat = tmp_path / "cat"
    copy_catalog(cat)
    variant = cat / "patches" / INDEX_K / "0.5.22" / "0001-keep-dsv4-index-k-in-bf16.patch"
    variant.write_text(variant.read_text().replace(" # only way to ask;", " # only way to ASK;", 1))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(cat), "matrix",
                           "--releases", "0.5.21,0.5.22", "--exit-code"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr  # a blocked cell fails --exit-code too
    rows = {(r[0], r[1]): r[2:] for r in (line.split("\t") for line in proc.stdout.splitlines())}
    revert = "revert-hicache-index-k-sync"
    assert list(rows) == [(f, r) for f in (INDEX_K, SIZING, revert) for r in ("0.5.21", "0.5.22")]
    assert {k: v[0] for k, v in rows.items()} == {
        (INDEX_K, "0.5.21"): "blocked", (INDEX_K, "0.5.22"): "conflict",
        (SIZING, "0.5.21"): f"blocked by {INDEX_K}", (SIZING, "0.5.22"): f"blocked by {INDEX_K}",
        (revert, "0.5.21"): "not-needed", (revert, "0.5.22"): "not-needed"}, proc.stdout
    assert rows[INDEX_K, "0.5.21"][1].startswith(
        "0001-keep-dsv4-index-k-in-bf16.patch does not apply to its base 0.5.22")
    assert f"the catalog {cat} is not in git" in rows[SIZING, "0.5.21"][1]
    assert rows[SIZING, "0.5.22"][1].startswith(f"{INDEX_K} on 0.5.22: conflict: v3 no longer applies")
    assert "patchkit-matrix-" not in proc.stdout + proc.stderr
    assert "patchkit-rebase-" not in proc.stdout + proc.stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


# -- a fleet on two releases --------------------------------------------------------------------


def test_a_fleet_on_two_releases_converges_in_one_sync(fleet_servers, three_releases: UpstreamRepo,
                                                        tmp_path: Path) -> None:
    """h1, h2 still on 0.5.22, h3 on 0.5.23: one `sync --inventory` gives each host its
    release's variants; a second one changes nothing."""
    import os

    from tests.fixtures.fleet_hosts import ansible_env, write_inventory

    release = {"h1": "0.5.22", "h2": "0.5.22", "h3": "0.5.23"}
    trees = {h.name: checkout(three_releases, release[h.name], tmp_path / h.name)
             for h in fleet_servers.hosts}
    inventory = write_inventory(tmp_path / "inventory.yml", fleet_servers.hosts, {
        name: {"patchkit_target": str(tree), "patchkit_python": sys.executable}
        for name, tree in trees.items()}, python=sys.executable)
    env = ansible_env(tmp_path, os.environ)

    def sync(*extra: str) -> tuple[int, dict]:
        proc = subprocess.run([str(Path(sys.executable).parent / "patchkit"), "--catalog",
                               str(REPO), "sync", "--inventory", str(inventory), "--json", *extra],
                              env=env, capture_output=True, text=True, timeout=600)
        try:
            return proc.returncode, json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}") from None

    code, report = sync()
    assert code == 0, report
    assert {h["host"]: h["state"] for h in report["hosts"]} == {n: "applied" for n in trees}
    # the preflight groups the hosts by what they get: here, by the release they run
    assert sorted(g["hosts"] for g in report["groups"]) == [["h1", "h2"], ["h3"]], report["groups"]
    for name, tree in trees.items():
        state = json.loads((tree / ".patchkit" / "state.json").read_text())
        want = 3 if release[name] == "0.5.22" else 4
        assert {f["name"]: f["version"] for f in state["fixes"]} == {INDEX_K: want, SIZING: want}
    # status groups the hosts by release; two versions on two releases is converged
    status = subprocess.run([str(Path(sys.executable).parent / "patchkit"), "--catalog", str(REPO),
                             "status", "--inventory", str(inventory), "--json", "--exit-code"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert status.returncode == 0, status.stdout + status.stderr
    seen = json.loads(status.stdout)
    assert seen["by_release"] == {"0.5.22": ["h1", "h2"], "0.5.23": ["h3"]}
    assert seen["matrix"]["h1"][INDEX_K] == {"state": "applied", "version": 3, "release": "0.5.22"}
    code, again = sync()
    assert code == 0 and {h["state"] for h in again["hosts"]} == {"unchanged"}, again


def test_a_matrix_range_takes_every_release_the_store_holds_in_it(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """`--releases 0.5.21..0.5.23` over a catalog whose fixes name only 0.5.23: 0.5.22, in the
    store but served by no variant, is checked too (the range was filled from the catalog's
    variants only, so a release watch skipped it without a word); a list comes oldest first."""
    cat = tmp_path / "cat"
    subprocess.run([sys.executable, "-m", "patchkit", "init", str(cat)], check=True,
                   capture_output=True)
    config = cat / "patchkit.toml"
    config.write_text(config.read_text().replace("shipped_fixes = true", "shipped_fixes = false"))
    patches = tmp_path / "q" / "patches"
    patches.mkdir(parents=True)
    (patches / "series").write_text("mark-version.patch\n")
    (patches / "mark-version.patch").write_text(
        "--- a/python/sglang/srt/environ.py\n+++ b/python/sglang/srt/environ.py\n"
        "@@ -1,1 +1,2 @@\n+# marked\n import os\n")
    env = dict(os.environ, PATCHKIT_UPSTREAM=str(three_releases.path))
    made = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(cat), "import",
                           "--quilt", str(patches.parent), "--release", "0.5.23"],
                          capture_output=True, text=True, env=env)
    assert made.returncode == 0, made.stderr
    proc = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(cat), "matrix",
                           "--releases", "v0.5.21..0.5.23", "--json"], capture_output=True,
                          text=True, env=env, timeout=900)
    assert json.loads(proc.stdout)["releases"] == ["0.5.21", "0.5.22", "0.5.23"], proc.stderr
    listed = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(cat), "matrix",
                             "--releases", "0.5.23,v0.5.22", "--json"], capture_output=True,
                            text=True, env=env, timeout=900)
    assert json.loads(listed.stdout)["releases"] == ["0.5.22", "0.5.23"], listed.stderr


@pytest.mark.parametrize("args, said", [
    (["--releases", "0.5.23..0.5.22"], "0.5.23 comes after 0.5.22"),
    (["--releases", "0.5.22", "--markdown", "--json"], "pick one"),
    (["--releases", "latest"], "latest"),
    (["--releases", "0.5.23,,0.5.22"], "an empty item"),
])
def test_matrix_refuses_bad_input_with_exit_2_before_fetching(args: list[str], said: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(REPO), "matrix",
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr


def test_the_demo_fork_on_0522_takes_the_0522_variants_and_its_revert_finds_the_commit(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    from patchkit.demo import SEED_FIXES, build_fork

    catalog = Catalog(REPO)
    fork = build_fork(tmp_path / "demo", catalog, release="0.5.22", upstream=three_releases)
    target = LocalTarget({"sglang": str(fork.sglang), "serve": str(fork.serve)}, sys.executable, "fork")
    applied = api.apply(catalog, target, list(SEED_FIXES))
    assert {f.name: (f.outcome, f.version) for f in applied.fixes} == {
        SIZING: ("applied", 3), "revert-hicache-index-k-sync": ("applied", 4),
        "prefill-hicache-off": ("applied", 1)}
    reverted = next(f for f in applied.fixes if f.name == "revert-hicache-index-k-sync")
    assert reverted.reverts["found_by"].startswith("patch-id")  # the 0.5.22 series found the commit


def test_a_rebase_that_finds_the_fix_upstream_marks_it_and_adds_no_variant(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    git_dir = str(three_releases.git_dir)

    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", git_dir, *args], check=True,
                              capture_output=True, text=True).stdout

    changed = [line.split("\t") for line in git("diff", "--numstat", "v0.5.22", "v0.5.23").splitlines()]
    # a small .py file 0.5.23 modified: its whole upstream change, as a fix written on 0.5.22
    path = min((p for a, d, p in changed if p.endswith(".py") and a != "-" and int(a) + int(d) <= 6
                and int(a) and int(d)), key=len)
    patch = git("diff", "v0.5.22", "v0.5.23", "--", path)
    cat = tmp_path / "cat"
    (cat / "patches" / "up").mkdir(parents=True)
    (cat / "patches" / "up" / "0001-up.patch").write_text(patch)
    (cat / "manifests").mkdir()
    (cat / "manifests" / "up.toml").write_text(new_manifest_text(
        "up", "what 0.5.23 does", "0.5.22", [("0001-up.patch", "sglang")], "why", date="2026-11-01"))
    before = (cat / "patches" / "up" / "0001-up.patch").read_bytes()

    report = rebase.start(Catalog.open(cat), "0.5.23", upstream=three_releases)
    assert [f.outcome for f in report.fixes] == ["upstreamed"], report.fixes
    fix = Catalog.open(cat).get("up")
    assert (fix.status, fix.upstream.applied, fix.version, fix.variants) == ("upstreamed", "0.5.23", 1, ())
    assert fix.upstream.releases == ("0.5.22",) and fix.not_needed_on("0.5.23")
    assert (cat / "patches" / "up" / "0001-up.patch").read_bytes() == before


def test_sync_over_ssh_gives_the_host_its_release_variants(sshd, three_releases: UpstreamRepo,
                                                           tmp_path: Path) -> None:
    from tests.test_remote import Ssh, cli, target_args

    ssh = Ssh(sshd, tmp_path)
    tree = checkout(three_releases, "0.5.22", tmp_path / "host")
    where = target_args(ssh, "remote", {"sglang": str(tree)})
    code, out, err = cli(["--catalog", str(REPO), "sync", "--dry-run", "--json", *where])
    assert code == 0, err
    planned = {f["name"]: (f["outcome"], f["version"]) for f in json.loads(out)["fixes"]}
    assert planned[INDEX_K] == ("would-apply", 3) and not (tree / ".patchkit" / "state.json").exists()
    code, out, err = cli(["--catalog", str(REPO), "sync", "--dry-run", *where])
    assert code == 0 and out.startswith("dry run of sync on "), out  # the command, not its op
    code, out, err = cli(["--catalog", str(REPO), "sync", *where])
    assert code == 0, err
    assert out.startswith("sync on ") and f"applied {INDEX_K} v3" in out and f"applied {SIZING} v3" in out
    assert "not-needed revert-hicache-index-k-sync" in out
    assert states(Catalog(REPO), local(tree))[SIZING] == ("applied", 3)


def test_every_0522_variant_applies_with_gnu_patch_zero_fuzz(three_releases: UpstreamRepo,
                                                             tmp_path: Path) -> None:
    """The 0.5.22 series are plain diffs any tool applies, in dependency order; the revert's
    undoes the dead fix's exactly."""
    tree = checkout(three_releases, "0.5.22", tmp_path / "t")
    catalog = Catalog(REPO)
    for name in (INDEX_K, SIZING, "hicache-index-k-sync", "revert-hicache-index-k-sync"):
        variant = catalog.get(name).variant_for("0.5.22")
        assert variant is not None and variant.version < catalog.get(name).version
        for ref in variant.patches:
            run = subprocess.run(["patch", "-p1", "-F0", "-N", "-i", str(ref.path)], cwd=tree,
                                 capture_output=True, text=True)
            assert run.returncode == 0 and "fuzz" not in run.stdout and "offset" not in run.stdout, \
                f"{name}: {run.stdout}{run.stderr}"
    changed = subprocess.run(["git", "diff", "--name-only"], cwd=tree, capture_output=True,
                             text=True, check=True).stdout.split()
    assert "python/sglang/srt/mem_cache/memory_pool_host.py" not in changed
    assert "python/sglang/srt/model_executor/pool_configurator.py" in changed


def test_a_rebase_onto_a_release_a_variant_serves_says_so(three_releases: UpstreamRepo,
                                                          tmp_path: Path) -> None:
    """The shipped catalog rebased onto 0.5.22, which its v3 variants already serve: each fix
    is skipped saying so, not a conflict of the 0.5.23 series nor "version 3 cannot be read"
    from the catalog's history for the fixes on top (a variant is in the manifest)."""
    catalog = copy_catalog(tmp_path / "cat")
    report = rebase.start(catalog, "0.5.22", upstream=three_releases, dry_run=True,
                          names=[INDEX_K, SIZING, "revert-hicache-index-k-sync"])
    said = {f.name: (f.outcome, f.detail) for f in report.fixes}
    for name, version in ((INDEX_K, 3), (SIZING, 3), ("revert-hicache-index-k-sync", 4)):
        outcome, detail = said[name]
        assert outcome == "skipped" and f"variant v{version} (based on 0.5.22) already serves" in detail, said


def test_a_backport_starts_from_the_nearest_variant_and_adds_one(three_releases: UpstreamRepo,
                                                                tmp_path: Path) -> None:
    """Onto 0.5.21, older than every version of the shipped fixes: each starts from its 0.5.22
    variant (which applies there), not the 0.5.23 series at the top (which conflicts), and
    the fix gets a variant for 0.5.21, the top level and the other variants untouched; a
    series that applies unchanged adds the release to the variant it came from."""
    catalog = copy_catalog(tmp_path / "cat")
    names = [INDEX_K, SIZING]
    dry = rebase.start(catalog, "0.5.21", upstream=three_releases, dry_run=True, names=names)
    said = {f.name: (f.outcome, f.old_version, f.detail) for f in dry.fixes}
    assert all(outcome in ("rebased", "extended") and old == 3 for outcome, old, _ in said.values()), said
    before = {n: Catalog.open(tmp_path / "cat").get(n) for n in names}
    report = rebase.start(Catalog.open(tmp_path / "cat"), "0.5.21", upstream=three_releases,
                          names=names)
    assert [f.outcome for f in report.fixes] == [said[n][0] for n in names]
    tree = checkout(three_releases, "0.5.21", tmp_path / "t521")
    for name in names:
        old, fix = before[name], Catalog.open(tmp_path / "cat").get(name)
        assert (fix.version, fix.upstream.releases) == (old.version, old.upstream.releases)
        assert [p.path.read_bytes() for p in fix.patches] == [p.path.read_bytes() for p in old.patches]
        served = fix.variant_for("0.5.21")
        assert served is not None and served.version != fix.version
        assert fix.variant_for("0.5.22") is not None and fix.variant_for("0.5.23").version == old.version
    applied = api.apply(Catalog.open(tmp_path / "cat"), local(tree), names)
    assert [f.name for f in applied.fixes] == names
    assert all(f.version == Catalog.open(tmp_path / "cat").get(f.name).variant_for("0.5.21").version
               for f in applied.fixes)


def test_a_shipped_fix_copied_alone_is_backported_on_its_shipped_dependency(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """The recipe patchkit gives for a shipped fix with no variant for a release: init a
    catalog, copy that fix's manifest and series, rebase it onto the release. Its dependency,
    shipped too, stays beside: the dry run and the matrix read it, the real run failed on a
    path inside its own backup (exit 2, a ManifestError) and left the backup behind. It
    reads the dependency where the dry run does, and writes only the copied fix."""
    cat = tmp_path / "mine"
    subprocess.run([sys.executable, "-m", "patchkit", "init", str(cat), "--no-git"], check=True,
                   capture_output=True)
    shutil.copy(REPO / "manifests" / f"{SIZING}.toml", cat / "manifests")
    shutil.copytree(REPO / "patches" / SIZING, cat / "patches" / SIZING)
    report = rebase.start(Catalog.open(cat), "0.5.21", upstream=three_releases, names=[SIZING])
    assert [(f.name, f.outcome) for f in report.fixes] == [(SIZING, "rebased")], report
    assert Catalog.open(cat).get(SIZING).variant_for("0.5.21") is not None
    assert not (cat / ".patchkit-rebase").exists()
    assert sorted(p.name for p in (cat / "manifests").glob("*.toml")) == [f"{SIZING}.toml"]


def test_a_backport_stopped_at_a_conflict_continues_from_the_variant_it_started_from(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A backport onto 0.5.21 from the 0.5.22 variant stops at a conflict (its hunk edits a
    line 0.5.22 added); the resolution taken by --continue is written as the new 0.5.21
    variant, whose patch keeps the 0.5.22 variant's mail header: --continue read the top
    level's patch of the same name instead."""
    from patchkit.catalog.series import diff_files

    git_dir = Path(three_releases.git_dir)

    def blob(tag: str, path: str) -> str:
        return subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{tag}:{path}"],
                              check=True, capture_output=True, text=True).stdout
    rows = subprocess.run(["git", "--git-dir", str(git_dir), "diff", "--numstat", "--diff-filter=M",
                           "v0.5.21", "v0.5.22", "--", "python/sglang/srt"], check=True,
                          capture_output=True, text=True).stdout.splitlines()
    picks = sorted((int(a) + int(r), p) for a, r, p in (row.split("\t") for row in rows)
                   if p.endswith(".py") and a != "-")
    rel, line = next((p, ln) for _n, p in picks for ln in blob("v0.5.22", p).splitlines()
                     if len(ln.strip()) > 12 and ln not in blob("v0.5.21", p).splitlines()
                     and blob("v0.5.22", p).count(ln) == 1)
    new22 = blob("v0.5.22", rel)
    cat = tmp_path / "cat"
    for folder, head, text in (("", "top", blob("v0.5.23", rel)), ("0.5.22", "variant", new22)):
        (cat / "patches" / "sw" / folder).mkdir(parents=True, exist_ok=True)
        edited = text + "# sw\n" if folder == "" else text.replace(line, line + "  # sw", 1)
        (cat / "patches" / "sw" / folder / "0001-sw.patch").write_text(
            f"Subject: [PATCH] the {head} series\n\n" + diff_files(text.encode(), edited.encode(), rel))
    (cat / "manifests").mkdir()
    (cat / "manifests" / "sw.toml").write_text(new_manifest_text(
        "sw", "a switch", "0.5.23", [("0001-sw.patch", "sglang")], "why", date="2026-11-01")
        .replace("version = 1 ", "version = 2 ", 1)
        + '\n[[changelog]]\nversion = 2\ndate = "2026-11-02"\nbase_release = "0.5.23"\n'
          'summary = "Rebased from 0.5.22 onto 0.5.23."\n'
        + '\n[[variants]]\nversion = 1\nbase_release = "0.5.22"\nreleases = ["0.5.22"]\n\n'
          '[[variants.patches]]\nfile = "0001-sw.patch"\nroot = "sglang"\n')
    report = rebase.start(Catalog.open(cat), "0.5.21", upstream=three_releases)
    assert report.stopped == "sw", report
    resolved = blob("v0.5.21", rel) + "# resolved for 0.5.21\n"
    (Path(report.worktree) / rel).write_text(resolved)
    done = rebase.continue_(Catalog.open(cat), upstream=three_releases)
    assert [f.outcome for f in done.fixes] == ["rebased"], done
    fix = Catalog.open(cat).get("sw")
    served = fix.variant_for("0.5.21")
    assert served is not None and served.version == 3 and fix.version == 2
    text = served.patches[0].path.read_text()
    assert text.startswith("Subject: [PATCH] the variant series"), text
    assert "+# resolved for 0.5.21" in text


def test_refresh_from_a_checkout_of_a_variants_release_refreshes_that_variant(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A bug in an older release's series, fixed on a checkout of it: refresh rewrites the
    variant serving that release as the fix's next version, the top level untouched. Before,
    it rewrote the newest series as 0.5.22's and dropped the variant; then it was refused,
    advising a rebase that skips the fix (a new-user trial). The 0.5.22 hosts get the new
    version, the 0.5.23 ones keep theirs."""
    from patchkit import authoring

    catalog = copy_catalog(tmp_path / "cat")
    top_patches = {p: p.read_bytes() for p in (tmp_path / "cat" / "patches" / SIZING).glob("*.patch")}
    tree = checkout(three_releases, "0.5.22", tmp_path / "old")
    api.apply(catalog, local(tree), [SIZING], with_deps=True)
    configurator = tree / "python/sglang/srt/model_executor/pool_configurator.py"
    configurator.write_text(configurator.read_text() + "# sized for 0.5.22 too\n")

    result = authoring.refresh_fix(catalog, SIZING, tree, commit=False)

    assert (result.version, result.changed) == (5, True)
    fix = Catalog.open(tmp_path / "cat").get(SIZING)
    assert fix.version == 4 and fix.serves() == {"0.5.23": 4, "0.5.22": 5}
    [variant] = fix.variants
    assert "+# sized for 0.5.22 too" in variant.patches[0].path.read_text()
    assert fix.changelog[-1].version == 5 and fix.changelog[-1].base_release == "0.5.22"
    assert {p: p.read_bytes() for p in top_patches} == top_patches  # the top level as it was
    catalog = Catalog.open(tmp_path / "cat")
    # the checkout holds v5's change already: outdated, and apply records it writing nothing
    assert states(catalog, local(tree))[SIZING] == ("outdated", 3)
    before = configurator.read_bytes()
    assert [f.outcome for f in api.apply(catalog, local(tree), [SIZING]).fixes] == ["upgraded"]
    assert configurator.read_bytes() == before and states(catalog, local(tree))[SIZING] == ("applied", 5)
    fresh = checkout(three_releases, "0.5.22", tmp_path / "fresh")
    api.apply(catalog, local(fresh), [SIZING], with_deps=True)
    assert states(catalog, local(fresh))[SIZING] == ("applied", 5)
    assert (fresh / configurator.relative_to(tree)).read_bytes() == before
    new = checkout(three_releases, "0.5.23", tmp_path / "new")
    api.apply(catalog, local(new), [SIZING], with_deps=True)
    assert states(catalog, local(new))[SIZING] == ("applied", 4)
    assert "sized for 0.5.22" not in (new / configurator.relative_to(tree)).read_text()
    # the next version of the fix is above both: a refresh of the top level is v6
    assert Catalog.open(tmp_path / "cat").get(SIZING).next_version == 6


def test_a_refresh_keeps_the_old_version_for_the_other_releases_it_served(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A fix whose one series serves 0.5.22 and 0.5.23, refreshed from a 0.5.23 checkout: the
    new version is known to apply to 0.5.23 only, so the old one stays the variant for 0.5.22,
    as a rebase keeps it. Before, 0.5.22 left the fix without a word: sync then failed on every
    0.5.22 host and apply refused a fresh one (a new-user trial)."""
    from patchkit import authoring

    dest = tmp_path / "cat"
    (dest / "manifests").mkdir(parents=True)
    (dest / "patches").mkdir()
    catalog = Catalog.open(dest)
    module = "python/sglang/srt/runtime_context.py"
    edit22 = checkout(three_releases, "0.5.22", tmp_path / "edit22")
    (edit22 / module).write_text("# note: runtime context\n" + (edit22 / module).read_text())
    authoring.new_fix(catalog, "rc-note", edit22, rationale="a note", commit=False)
    assert edit.add_release(dest / "manifests" / "rc-note.toml", "0.5.23")  # what a clean rebase does
    catalog = Catalog.open(dest)
    host22 = checkout(three_releases, "0.5.22", tmp_path / "host22")
    prod23 = checkout(three_releases, "0.5.23", tmp_path / "prod23")
    for tree in (host22, prod23):
        api.apply(catalog, local(tree), ["rc-note"])
    (prod23 / module).write_text((prod23 / module).read_text().replace(
        "# note: runtime context\n", "# note: runtime context (reworded)\n"))

    result = authoring.refresh_fix(catalog, "rc-note", prod23, commit=False)

    assert (result.version, result.kept_for, result.kept_version) == (2, ("0.5.22",), 1)
    catalog = Catalog.open(dest)
    assert catalog.get("rc-note").serves() == {"0.5.23": 2, "0.5.22": 1}
    assert [f.outcome for f in api.sync(catalog, local(host22), dry_run=True).fixes] == ["already-applied"]
    fresh = checkout(three_releases, "0.5.22", tmp_path / "fresh22")
    assert api.apply(catalog, local(fresh), ["rc-note"]).fixes[0].version == 1
    assert "(reworded)" not in (fresh / module).read_text()
    assert states(catalog, local(prod23))["rc-note"] == ("outdated", 1)


def test_refresh_says_which_releases_keep_the_old_version() -> None:
    from patchkit.catalog.writer import AuthoringResult
    from patchkit.cli.authoring import _refresh_warnings

    result = AuthoringResult("rc-note", 2, Path("m.toml"), (), (), "0.5.23", True,
                             kept_for=("0.5.22",), kept_version=1)
    assert _refresh_warnings(result, "rc-note", "../prod23") == [
        "rc-note v2 is known to apply to 0.5.23 only: v1 stays the variant for 0.5.22; "
        "patchkit rebase rc-note --onto RELEASE carries v2 there"]


def test_a_refresh_of_a_variant_serving_two_releases_keeps_the_old_one_for_the_other(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A variant serving 0.5.21 and 0.5.22 refreshed from a 0.5.22 checkout: the new version
    serves 0.5.22, based on it, and the old one stays a variant for 0.5.21 (its series copied to
    a folder of its own), as for the top level. Before, the variant was rewritten for both, and
    0.5.21 trees could no longer apply the fix (a fresh-clone trial)."""
    from patchkit import authoring

    dest = tmp_path / "cat"
    (dest / "manifests").mkdir(parents=True)
    (dest / "patches").mkdir()
    module = "python/sglang/srt/constants.py"
    edit21 = checkout(three_releases, "0.5.21", tmp_path / "edit21")
    (edit21 / module).write_text("# note: constants\n" + (edit21 / module).read_text())
    authoring.new_fix(Catalog.open(dest), "c-note", edit21, rationale="a note", commit=False)
    manifest = dest / "manifests" / "c-note.toml"
    for release in ("0.5.22", "0.5.23"):
        assert edit.add_release(manifest, release)
    new = checkout(three_releases, "0.5.23", tmp_path / "new")
    api.apply(Catalog.open(dest), local(new), ["c-note"])
    (new / module).write_text((new / module).read_text().replace("# note: constants\n",
                                                                 "# note: constants (0.5.23)\n"))
    authoring.refresh_fix(Catalog.open(dest), "c-note", new, commit=False)  # top v2: 0.5.23
    assert Catalog.open(dest).get("c-note").serves() == {"0.5.23": 2, "0.5.21": 1, "0.5.22": 1}
    tree22 = checkout(three_releases, "0.5.22", tmp_path / "tree22")
    api.apply(Catalog.open(dest), local(tree22), ["c-note"])
    (tree22 / module).write_text((tree22 / module).read_text().replace(
        "# note: constants\n", "# note: constants (0.5.22)\n"))

    result = authoring.refresh_fix(Catalog.open(dest), "c-note", tree22, commit=False)

    assert (result.version, result.kept_for, result.kept_version) == (3, ("0.5.21",), 1)
    fix = Catalog.open(dest).get("c-note")
    assert fix.serves() == {"0.5.23": 2, "0.5.22": 3, "0.5.21": 1}
    assert fix.variant_for("0.5.22").upstream.base_release == "0.5.22"
    for release, said in (("0.5.21", "# note: constants\n"), ("0.5.22", "(0.5.22)")):
        fresh = checkout(three_releases, release, tmp_path / f"fresh-{release}")
        api.apply(Catalog.open(dest), local(fresh), ["c-note"])
        assert said in (fresh / module).read_text()


def test_upstream_check_judges_a_release_a_variant_serves_against_that_variant(
        three_releases: UpstreamRepo) -> None:
    """The shipped fixes are based on 0.5.23 with a 0.5.22 variant: `upstream check --release
    0.5.22` called 0.5.22 "older than its base release 0.5.23" and did not ask it (a new-user
    trial). The variant serving 0.5.22 is what that release is asked about; a release older
    than every version of the fix is still not asked, and says so."""
    from patchkit.rebase.contains import check

    shipped = Catalog(REPO)
    said = {v.fix: v for v in check(shipped, [INDEX_K, SIZING], "0.5.22", upstream=three_releases)}
    for name in (INDEX_K, SIZING):
        verdict = said[name]
        assert verdict.verdict == "not-contained", verdict
        assert "older than" not in verdict.detail and "variant v3 (based on 0.5.22)" in verdict.detail
    older = check(shipped, [SIZING], "0.5.21", upstream=three_releases)[0]
    assert older.verdict == "not-applicable", older
    assert "0.5.21 is older than every version of the fix (the oldest based on 0.5.22)" in older.detail


def test_a_lost_fix_marked_upstream_in_the_release_the_checkout_moved_to_is_not_needed(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A fix of 0.5.22 applied there, and the checkout moved to 0.5.23 with git checkout -f:
    the record is lost. Unmarked, status says so and how to make a version for 0.5.23, each
    sentence capitalized (it read "... no longer present. no version of the fix serves ...").
    Marked upstream since 0.5.23, status advised that rebase all the same, where rebase says
    there is nothing to rebase and sync forgets the record; and sync --dry-run said
    "re-applied: was lost" under `not-needed`, though nothing is applied (a new-user trial).
    Now status says not-needed, in upstream since 0.5.23, and that sync forgets the record."""
    cat, tree, _ = _local_edit(three_releases, tmp_path)

    def pk(*args: object) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(cat),
                               *map(str, args), "--target", str(tree)], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=300)

    def row(res: subprocess.CompletedProcess) -> str:
        assert res.returncode == 0, res.stdout + res.stderr
        return next(ln for ln in res.stdout.splitlines() if ln.startswith("local-edit\t"))

    assert pk("apply", "local-edit").returncode == 0
    _git(tree, "checkout", "-q", "-f", "v0.5.23")
    lost = row(pk("status"))
    assert "\tlost: sglang 0.5.22 -> 0.5.23: the checkout moved to another release" in lost, lost
    assert ("recorded v1 no longer present. No version of the fix serves 0.5.23 (v1 is for "
            "0.5.22): make one with patchkit rebase local-edit --onto 0.5.23, then apply it"
            in lost), lost

    assert edit.set_upstream(cat / "manifests" / "local-edit.toml", "0.5.23")
    seen = row(pk("status"))
    assert "\tnot-needed: in upstream since 0.5.23 (the target runs 0.5.23)" in seen, seen
    assert "patchkit sync" in seen and "forgets it" in seen, seen
    assert "rebase" not in seen and "no version" not in seen.lower(), seen
    listed = json.loads(pk("status", "--json").stdout)["status"]["fixes"]
    assert [(f["state"], f["version"]) for f in listed if f["name"] == "local-edit"] == [
        ("not-needed", 1)]

    dry = pk("sync", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    said = dry.stdout[dry.stdout.index("not-needed local-edit"):]
    assert "re-applied" not in dry.stdout, dry.stdout
    assert "in upstream since 0.5.23" in said and "would be forgotten" in said, said
    assert "sglang 0.5.22 -> 0.5.23" in said, said  # why the record is stale: lost to the move
    assert "local-edit" in (tree / ".patchkit" / "state.json").read_text()
    done = pk("sync")
    assert done.returncode == 0 and "re-applied" not in done.stdout, done.stdout + done.stderr
    assert "local-edit" not in json.dumps(json.loads(
        (tree / ".patchkit" / "state.json").read_text())["fixes"])
    assert row(pk("status")).startswith(
        "local-edit\tnot-needed: in upstream since 0.5.23 (the target runs 0.5.23)")
    assert _git(tree, "status", "--porcelain", "--", "python") == ""


def _local_edit(three_releases: UpstreamRepo, tmp_path: Path, releases: str = '"0.5.22"'
                ) -> tuple[Path, Path, str]:
    """(catalog, a 0.5.22 checkout, the file): a catalog of one fix, ``local-edit``, that
    appends a line to a file 0.5.22 and 0.5.23 hold alike, for ``releases``; no checks of
    its own, so a verify of it checks its files alone."""
    from patchkit.catalog.series import diff_files

    cat, rel = tmp_path / "cat", "python/sglang/__init__.py"
    tree = checkout(three_releases, "0.5.22", tmp_path / "t")
    assert _git(tree, "diff", "--stat", "v0.5.22", "v0.5.23", "--", rel) == ""
    old = (tree / rel).read_bytes()
    (cat / "patches" / "local-edit").mkdir(parents=True)
    (cat / "patches" / "local-edit" / "0001-local-edit.patch").write_text(
        diff_files(old, old + b"# a local edit\n", rel))
    (cat / "manifests").mkdir()
    (cat / "manifests" / "local-edit.toml").write_text(new_manifest_text(
        "local-edit", "a local edit", "0.5.22", [("0001-local-edit.patch", "sglang")], "why",
        date="2026-11-01").replace('releases = ["0.5.22"]', "releases = [%s]" % releases))
    return cat, tree, rel


def test_verify_of_a_fix_lost_to_a_move_says_lost_and_advises_what_status_does(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A fix applied on 0.5.22, the checkout then moved to 0.5.23 by git (checkout -f): status
    says lost, and verify's line for the fix did too, but its verdict was "1 applied fix(es)
    drifted: files changed since patchkit wrote them", a DriftError, whose advice (rollback
    --force, or refresh to keep the edits) is for a hand edit (a new-user trial). Now the
    verdict is FixLost, exit 1 as `status --exit-code`, with status's own advice."""
    from patchkit.errors import FixLost
    from tests.test_remote import cli

    cat, tree, _ = _local_edit(three_releases, tmp_path)
    catalog = Catalog.open(cat)
    assert api.apply(catalog, local(tree), ["local-edit"]).fixes[0].outcome == "applied"
    _git(tree, "checkout", "-q", "-f", "v0.5.23")
    seen = {s.name: s for s in api.status(catalog, local(tree)).status}["local-edit"]
    assert seen.state == "lost" and seen.detail
    assert "rebase local-edit --onto 0.5.23" in seen.detail, seen.detail

    with pytest.raises(FixLost) as exc:
        api.verify(catalog, local(tree), [])
    assert exc.value.exit_code == 1
    assert "1 applied fix(es) lost" in exc.value.message, exc.value.message
    assert "drifted" not in exc.value.message and "refresh" not in exc.value.message
    assert seen.detail in exc.value.message, exc.value.message  # status's why and advice
    assert exc.value.details["lost"] == ["local-edit"]

    code, out, err = cli(["--catalog", str(cat), "verify", "--target", str(tree), "--json"])
    assert code == 1, out + err
    error = json.loads(out)["error"]
    assert error["type"] == "FixLost" and error["details"]["lost"] == ["local-edit"]
    [fix] = error["details"]["fixes"]
    assert fix["outcome"] == "failed" and fix["detail"] == seen.detail, fix
    assert seen.detail.startswith(fix["lost"] + ". ") and "again" not in fix["lost"], fix
    # its check is of its own kind: "drift", "files as patchkit wrote them" said a hand edit
    assert [(c["kind"], c["name"]) for c in fix["verification"]] == [
        ("lost", "the fix's change in its files")], fix
    code, out, err = cli(["--catalog", str(cat), "verify", "--target", str(tree)])
    assert code == 1 and "lost" in err and "drifted" not in err, out + err
    assert "[drift]" not in err and "files as patchkit wrote them" not in err, err
    assert cli(["--catalog", str(cat), "status", "--exit-code", "--target", str(tree)])[0] == code


def test_a_committed_fix_whose_commit_a_move_left_behind_is_lost_and_applied_again(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A fix for 0.5.22 and 0.5.23 alike (one series), applied with --commit on 0.5.22, and
    the checkout then moved to 0.5.23 by git: HEAD no longer holds the fix's commit and git
    put the release's bytes back. status said `drifted` and advised `rollback --force` (a
    revert of a commit no longer in the history), and sync said `already-applied` with drift
    advice, exit 0, on a tree nobody edited that runs none of the fix. Now it is lost: sync
    applies it again (without a commit: sync makes none), undo makes it lost again, and
    rollback forgets its record without reverting anything."""
    from patchkit.errors import FixLost
    from tests.test_remote import cli

    cat, tree, rel = _local_edit(three_releases, tmp_path, '"0.5.22", "0.5.23"')
    catalog = Catalog.open(cat)
    assert api.apply(catalog, local(tree), ["local-edit"], commit=True).fixes[0].outcome == "applied"
    committed = _git(tree, "rev-parse", "HEAD").strip()
    assert _git(tree, "log", "-1", "--format=%s").strip() == "a local edit"
    _git(tree, "checkout", "-q", "v0.5.23")
    head = _git(tree, "rev-parse", "HEAD").strip()
    assert _git(tree, "status", "--porcelain", "--", "python") == ""  # nobody edited a file
    release = (tree / rel).read_bytes()
    assert not release.endswith(b"# a local edit\n")

    seen = {s.name: s for s in api.status(catalog, local(tree)).status}["local-edit"]
    assert seen.state == "lost", (seen.state, seen.detail)
    assert committed[:12] in seen.detail and "no longer present" in seen.detail, seen.detail
    assert "--force" not in seen.detail and "patchkit sync" in seen.detail, seen.detail
    assert [f["state"] for f in seen.files] == ["replaced"], seen.files
    code, out, err = cli(["--catalog", str(cat), "status", "--target", str(tree), "--json"])
    assert code == 0, out + err
    [row] = [f for f in json.loads(out)["status"]["fixes"] if f["name"] == "local-edit"]
    assert row["state"] == "lost" and row["commits_gone"] == [{"root": "sglang", "sha": committed}], row
    assert cli(["--catalog", str(cat), "status", "--exit-code", "--target", str(tree)])[0] == 1
    with pytest.raises(FixLost):
        api.verify(catalog, local(tree), [])

    # rollback only forgets the record: no revert of a commit HEAD does not hold, no write
    dry = api.rollback(catalog, local(tree), ["local-edit"], dry_run=True).fixes[0]
    assert dry.outcome == "would-roll-back" and not dry.files, dry
    assert "lost (its commit is not in the history of HEAD)" in (dry.detail or ""), dry.detail

    # sync applies it again onto the files HEAD has, without a commit
    planned = api.sync(catalog, local(tree), dry_run=True).fixes
    assert [(f.name, f.outcome) for f in planned] == [("local-edit", "would-apply")], planned
    code, out, err = cli(["--catalog", str(cat), "sync", "--target", str(tree), "--json"])
    assert code == 0, out + err
    [fix] = json.loads(out)["fixes"]
    assert fix["outcome"] == "applied" and committed[:12] in fix["lost"], fix
    assert (tree / rel).read_bytes() == release + b"# a local edit\n"
    assert _git(tree, "rev-parse", "HEAD").strip() == head
    assert states(catalog, local(tree))["local-edit"] == ("applied", 1)

    # undo of that sync: the release's bytes and the lost record back
    assert api.undo(catalog, local(tree)).ok
    assert (tree / rel).read_bytes() == release
    assert states(catalog, local(tree))["local-edit"] == ("lost", 1)

    done = api.rollback(catalog, local(tree), ["local-edit"]).fixes[0]
    assert done.outcome == "rolled-back" and not done.files, done
    assert (tree / rel).read_bytes() == release
    assert _git(tree, "rev-parse", "HEAD").strip() == head  # no revert commit
    assert _git(tree, "status", "--porcelain", "--", "python") == ""
    assert states(catalog, local(tree))["local-edit"] == ("not-applied", 1)

    # committed again on the new HEAD (its clean check passes: the files are HEAD's), then
    # reset away on the same release: lost again, though the release never moved
    again = api.apply(catalog, local(tree), ["local-edit"], commit=True).fixes[0]
    assert again.outcome == "applied" and _git(tree, "rev-parse", "HEAD~1").strip() == head
    _git(tree, "reset", "-q", "--hard", "HEAD~1")
    assert states(catalog, local(tree))["local-edit"] == ("lost", 1)


def test_a_release_put_over_a_checkout_uncommitted_says_commit_it_not_discard_the_files(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """0.5.23's files copied over a 0.5.22 checkout under an applied fix, not committed: status
    called the changed files "edited since" (they differ from HEAD, the old release), and the
    apply again refused them with "discard them with git checkout HEAD -- FILE", which puts
    0.5.22's bytes into a 0.5.23 tree (a trial). Both now say the new release is not
    committed and how to commit it."""
    from patchkit.catalog.series import diff_files
    from tests.test_remote import cli

    rel = "python/sglang/srt/environ.py"
    tree = checkout(three_releases, "0.5.22", tmp_path / "t")
    assert _git(tree, "diff", "--stat", "v0.5.22", "v0.5.23", "--", rel)  # it differs
    old = (tree / rel).read_bytes()
    cat = tmp_path / "cat"
    (cat / "patches" / "edit").mkdir(parents=True)
    (cat / "patches" / "edit" / "0001-edit.patch").write_text(
        diff_files(old, b"# a local edit\n" + old, rel))
    (cat / "manifests").mkdir()
    (cat / "manifests" / "edit.toml").write_text(new_manifest_text(
        "edit", "a local edit", "0.5.22", [("0001-edit.patch", "sglang")], "why",
        date="2026-11-01"))
    catalog = Catalog.open(cat)
    assert api.apply(catalog, local(tree), ["edit"]).fixes[0].outcome == "applied"
    _git(tree, "restore", "--source", "v0.5.23", "--worktree", "--", "python")  # unpacked over

    seen = {s.name: s for s in api.status(catalog, local(tree)).status}["edit"]
    assert seen.state == "lost", seen
    assert "put over the checkout and not committed" in seen.detail, seen.detail
    assert "edited since" not in seen.detail, seen.detail
    code, out, err = cli(["--catalog", str(cat), "apply", "edit", "--target", str(tree)])
    assert code == 1, out + err
    assert "another release's files were put over this checkout and not committed" in err, err
    assert f"git -C {tree} add -A && git -C {tree} commit" in err, err
    assert "checkout HEAD --" not in err, err
    _git(tree, "add", "-A")  # as it says: the release committed, the move is git's
    _git(tree, "-c", "user.name=A", "-c", "user.email=a@example.org", "commit", "-qm", "0.5.23")
    seen = {s.name: s for s in api.status(catalog, local(tree)).status}["edit"]
    assert seen.state == "lost" and "the checkout moved to another release" in seen.detail


def test_a_matrix_cell_whose_version_applies_but_fails_its_own_verification_fails(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """A trial's rebase kept upstream's form of a line its fix's grep looks for: the version
    applied with zero fuzz, `matrix` said `v2 (0.5.23)`, and only a host's real apply, after
    writing, failed on the grep. The matrix's dry run now asks the checks that read a file
    (grep, sha256, python-syntax) of the files as the apply would write them."""
    from patchkit.matrix import matrix

    cat = tmp_path / "cat"
    for part in ("manifests", "patches"):
        shutil.copytree(REPO / part, cat / part)
    manifest = cat / "manifests" / f"{SIZING}.toml"
    text = manifest.read_text()
    wanted = 'pattern = "return get_dsv4_bf16_index_k_bytes_per_token(self.indexer_head_dim)"'
    assert text.count(wanted) == 2  # the top level (0.5.23) and the 0.5.22 variant
    manifest.write_text(text.replace(wanted, 'pattern = "return 2 * get_dsv4_bf16_index_k_bytes"', 1))
    found = matrix(Catalog.open(cat), ["0.5.22", "0.5.23"], [SIZING], upstream=three_releases)
    row = found.cells[SIZING]
    assert row["0.5.22"].label == "v3 (0.5.22)", row  # its variant's checks are its own
    assert row["0.5.23"].label == "verify fails", row
    assert "v4 applies, but its verification fails on 0.5.23" in row["0.5.23"].detail
    assert "return 2 * get_dsv4_bf16_index_k_bytes" in row["0.5.23"].detail
    assert found.failing == [(SIZING, "0.5.23")]
