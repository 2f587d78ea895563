"""Every rebase classification on the real SGLang history, 0.5.21 -> 0.5.23.

The fixes are the rebase benchmark's (bench/rebase_fixes.py): small real-looking edits of the
0.5.21 source, each classified *independently of patchkit* by ``git merge-file`` of
base / fixed / 0.5.23 (and a simulated GNU patch). Two more are made here from the real
drift: one whose change 0.5.23 already holds (upstream), one whose precondition names a line
0.5.23 removed (anchor-gone). patchkit's classification must agree with the independent one,
and every fix it rebases must, applied to a real 0.5.23 checkout with zero fuzz, give exactly
the three-way merge's file and pass its verification there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api, rebase
from patchkit.catalog import Catalog
from patchkit.catalog.edit import new_manifest_text
from patchkit.catalog.series import diff_files
from patchkit.targets import LocalTarget
from patchkit.upstream import UpstreamRepo
from tests.fixtures.sglang import checkout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from rebase_fixes import Fix, build_fixes  # noqa: E402

pytestmark = pytest.mark.network

EXPECTED = {"untouched": "unchanged", "moved": "offset", "context": "merged"}


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True,
                          capture_output=True, text=True).stdout


def _blob(git_dir: Path, rev: str, path: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "blob", f"{rev}:{path}"],
                          check=True, capture_output=True).stdout


def _write(cat: Path, name: str, path: str, patch: str, *, grep: str | None = None) -> None:
    (cat / "patches" / name).mkdir(parents=True)
    (cat / "patches" / name / f"0001-{name}.patch").write_text(patch)
    text = new_manifest_text(name, f"{name} title", "0.5.21", [(f"0001-{name}.patch", "sglang")],
                             "A fix on the real release.", date="2026-11-01")
    text += f'\n[[verification]]\nkind = "python-syntax"\nroot = "sglang"\npath = "{path}"\n'
    if grep is not None:
        pattern = grep.replace("\\", "\\\\").replace('"', '\\"')
        text += (f'\n[[preconditions]]\nkind = "grep"\nroot = "sglang"\npath = "{path}"\n'
                 f'pattern = "{pattern}"\npresent = true\n')
    (cat / "manifests").mkdir(exist_ok=True)
    (cat / "manifests" / f"{name}.toml").write_text(text)


def _upstream_fix(git_dir: Path, taken: set[str]) -> tuple[str, str]:
    """The smallest .py file 0.5.23 modified: its whole upstream change as a fix."""
    sizes = []
    for line in _git(git_dir, "diff", "--numstat", "--diff-filter=M", "v0.5.21", "v0.5.23",
                     "--", "python/sglang/srt").splitlines():
        added, removed, path = line.split("\t")
        if path.endswith(".py") and path not in taken and added != "-":
            sizes.append((int(added) + int(removed), path))
    _, path = min(sizes)
    old, new = _blob(git_dir, "v0.5.21", path), _blob(git_dir, "v0.5.23", path)
    return path, diff_files(old, new, path)


def _gone_line(git_dir: Path, path: str) -> str:
    """A line of ``path`` in 0.5.21 that 0.5.23 no longer has anywhere in the file."""
    new = _blob(git_dir, "v0.5.23", path).decode()
    for line in _blob(git_dir, "v0.5.21", path).decode().splitlines():
        text = line.strip()
        if len(text) > 12 and text not in new:
            return text
    raise AssertionError(f"no removed line in {path}")


def _catalog(git_dir: Path, cat: Path) -> dict[str, Fix]:
    """The benchmark's fixes plus an upstreamed one and an anchor-gone one, committed."""
    fixes = {f.name: f for f in build_fixes(git_dir)}
    for fix in fixes.values():
        _write(cat, fix.name, fix.path, fix.patch)
    taken = {f.path for f in fixes.values()}
    up_path, up_patch = _upstream_fix(git_dir, taken)
    _write(cat, "already-upstream", up_path, up_patch)
    # anchor-gone: an untouched-file edit guarded by a line 0.5.23 removed elsewhere
    moved = next(f for f in fixes.values() if f.kind == "moved")
    untouched = next(f for f in fixes.values() if f.kind == "untouched")
    _write(cat, "anchor-moved-away", untouched.path, untouched.patch)
    manifest = cat / "manifests" / "anchor-moved-away.toml"
    gone = _gone_line(git_dir, moved.path).replace("\\", "\\\\").replace('"', '\\"')
    manifest.write_text(manifest.read_text() + (
        f'\n[[preconditions]]\nkind = "grep"\nroot = "sglang"\npath = "{moved.path}"\n'
        f'pattern = "{gone}"\npresent = true\n'))
    subprocess.run(["git", "init", "-q", "-b", "main", str(cat)], check=True)
    subprocess.run(["git", "-C", str(cat), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(cat), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-m", "fixes on 0.5.21"], check=True)
    return fixes


@pytest.fixture(scope="module")
def fix_catalog(catalog_upstream: UpstreamRepo, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[Path, dict[str, Fix]]:
    """:func:`_catalog` made once for the module (choosing and classifying the fixes runs git
    and GNU patch on hundreds of files): each test rebases a copy of it."""
    cat = tmp_path_factory.mktemp("fix-catalog") / "catalog"
    return cat, _catalog(Path(catalog_upstream.git_dir), cat)


def copy_of(fix_catalog: tuple[Path, dict[str, Fix]], cat: Path) -> dict[str, Fix]:
    """A copy of the module's catalog (with its git repository) at ``cat``; its fixes."""
    shutil.copytree(fix_catalog[0], cat, symlinks=True)
    return fix_catalog[1]


@pytest.fixture(scope="module")
def real_rebase(catalog_upstream: UpstreamRepo, tmp_path_factory: pytest.TempPathFactory,
                fix_catalog: tuple[Path, dict[str, Fix]]):
    cat = tmp_path_factory.mktemp("real-rebase") / "catalog"
    fixes = copy_of(fix_catalog, cat)
    catalog = Catalog(cat)
    stops: dict[str, str] = {}
    report = rebase.start(catalog, "0.5.23", upstream=catalog_upstream)
    while not report.done:
        stopped = next(f for f in report.fixes if f.name == report.stopped)
        stops[report.stopped] = stopped.patches[-1].classification
        report = rebase.skip(catalog, upstream=catalog_upstream)
    classes = {f.name: f.patches[0].classification for f in report.fixes if f.patches}
    return catalog, fixes, classes, stops, report


def test_real_fixes_are_classified_as_the_three_way_merge_says(real_rebase) -> None:
    _catalog, fixes, classes, stops, _report = real_rebase
    for name, fix in fixes.items():
        if fix.expected is None:  # the merge conflicts: a stop, never a success
            assert stops.get(name) == "conflict", (name, fix.kind, classes.get(name))
        elif fix.kind in EXPECTED:
            assert classes[name] == EXPECTED[fix.kind], (name, fix.kind)
        else:  # "misplaced": GNU patch lands it with fuzz elsewhere; patchkit merges
            assert classes[name] == "merged", (name, fix.kind)
    assert classes["already-upstream"] == "upstream"
    assert stops["anchor-moved-away"] == "anchor-gone"
    kinds = set(classes.values()) | set(stops.values())
    assert kinds >= {"unchanged", "offset", "merged", "upstream", "conflict", "anchor-gone"}


def test_rebased_real_fixes_apply_to_0523_as_the_merge_and_verify(
        real_rebase, catalog_upstream: UpstreamRepo, tmp_path: Path) -> None:
    catalog, fixes, classes, stops, _report = real_rebase
    fresh = Catalog(catalog.root)
    rebased = [n for n, f in fixes.items() if n not in stops]
    for name in rebased:
        fix = fresh.get(name)
        if classes[name] == "unchanged":  # same series bytes: no new version, one more release
            assert (fix.version, fix.upstream.base_release) == (1, "0.5.21"), name
            assert fix.upstream.releases == ("0.5.21", "0.5.23"), name
        else:
            assert (fix.version, fix.upstream.base_release) == (2, "0.5.23"), name
    for name in stops:  # skipped: left as they were
        assert fresh.get(name).upstream.base_release == "0.5.21"
    tree = checkout(catalog_upstream, "0.5.23", tmp_path / "sglang")
    result = api.apply(fresh, LocalTarget({"sglang": str(tree)}), rebased)
    assert all(f.outcome == "applied" for f in result.fixes)
    assert all(c.ok for f in result.fixes for c in f.verification)
    for name in rebased:
        fix: Fix = fixes[name]
        assert (tree / fix.path).read_bytes() == fix.expected, f"{name} ({fix.kind}) misplaced"


def test_abort_on_the_real_releases_leaves_the_catalog_byte_identical(
        catalog_upstream: UpstreamRepo, tmp_path: Path,
        fix_catalog: tuple[Path, dict[str, Fix]]) -> None:
    cat = tmp_path / "catalog"
    copy_of(fix_catalog, cat)

    def snapshot() -> dict[str, bytes]:
        return {str(p.relative_to(cat)): p.read_bytes() for p in sorted(cat.rglob("*"))
                if p.is_file() and ".git" not in p.relative_to(cat).parts}

    before = snapshot()
    catalog = Catalog(cat)
    report = rebase.start(catalog, "0.5.23", upstream=catalog_upstream)
    assert not report.done and report.stopped
    report = rebase.skip(catalog, upstream=catalog_upstream)  # fixes before the next stop written
    assert snapshot() != before
    rebase.abort(catalog, upstream=catalog_upstream)
    assert snapshot() == before and not rebase.in_progress(catalog)
