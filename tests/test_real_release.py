"""The shipped fixes through the library, on the real SGLang release they are based on (0.5.23).

Every test works on a fresh git checkout of the release (``catalog_tree``), or on the seed's
production fork built from it (``patchkit.demo.build_fork``), and calls ``patchkit.api`` with
the repository's own catalog and a ``LocalTarget``. Whole trees are hashed before and after,
so "nothing was written" and "rolled back byte-exact" are checked on every file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.demo import FORK_COMMITS, LATER_EDIT, LATER_SUBJECT, SEED_FIXES, DemoFork
from patchkit.errors import PreconditionFailed, UsageError, VerificationFailed
from patchkit.catalog.model import Fix
from patchkit.results import FixOutcome, OpResult
from patchkit.catalog.series import parse_patch
from patchkit.targets import LocalTarget
from tests.fixtures.sglang import CATALOG_RELEASE, SGLANG_VERSION, checkout

pytestmark = pytest.mark.network  # the 0.5.23 tree comes from the registry once

REPO = Path(__file__).resolve().parent.parent
SERVE_SCRIPT = REPO / "docs" / "examples" / "serve_dsv4_prefill.sh"
HOST_POOL = "python/sglang/srt/mem_cache/memory_pool_host.py"
CONFIGURATOR = "python/sglang/srt/model_executor/pool_configurator.py"
PRODUCTION = ["dsv4-bf16-index-k", "dsv4-bf16-sizing", "prefill-hicache-off"]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog(REPO)


@pytest.fixture
def serve_dir(tmp_path: Path) -> Path:
    serve = tmp_path / "serve"
    serve.mkdir()
    shutil.copy2(SERVE_SCRIPT, serve / SERVE_SCRIPT.name)
    return serve


@pytest.fixture
def target(catalog_tree: Path, serve_dir: Path) -> LocalTarget:
    return LocalTarget(roots={"sglang": str(catalog_tree), "serve": str(serve_dir)},
                       description="test checkout")


# -- helpers ---------------------------------------------------------------------------------


def snapshot(*roots: Path) -> dict[str, str]:
    """sha256 of every file under the roots (git's and patchkit's own state left out)."""
    out: dict[str, str] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", ".patchkit")]
            for name in filenames:
                path = Path(dirpath, name)
                out[f"{root.name}:{path.relative_to(root)}"] = \
                    hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def git(tree: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True)
    return proc.stdout


def series_files(fix: Fix) -> set[tuple[str, str]]:
    """(root, path) of every file the fix's series touches."""
    return {(rec["root"], rec["path"]) for ref in fix.patches
            for rec in parse_patch(ref.path, ref.root)}


def roots_of(target: LocalTarget) -> dict[str, Path]:
    return {name: Path(path) for name, path in target.roots.items()}


def assert_applied_and_verified(outcome: FixOutcome, fix: Fix, roots: dict[str, Path],
                                pristine: dict[str, str]) -> None:
    """Outcome ``applied``; one passing result per verification check of the manifest, in
    order; the touched files are the series' files, changed, with the bytes reported."""
    assert outcome.outcome == "applied", outcome
    assert outcome.version == fix.version
    assert [c.kind for c in outcome.verification] == [c.kind for c in fix.verification]
    for want, got in zip(fix.verification, outcome.verification):
        assert got.ok, f"{fix.name}: verification {got.kind} {got.name}: {got.detail}"
        if want.get("name"):
            assert got.name == want.get("name")
    assert all(c.ok for c in outcome.preconditions), outcome.preconditions
    assert {(f.root, f.path) for f in outcome.files} == series_files(fix)
    for change in outcome.files:
        data = (roots[change.root] / change.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == change.after_sha256
        assert change.before_sha256 == pristine[f"{roots[change.root].name}:{change.path}"]
        assert change.after_sha256 != change.before_sha256


def states(result: OpResult) -> dict[str, tuple[str, int | None]]:
    return {s.name: (s.state, s.version) for s in result.status}


def assert_pristine(tree: Path, roots: dict[str, Path], pristine: dict[str, str]) -> None:
    assert snapshot(*roots.values()) == pristine
    assert git(tree, "status", "--porcelain", "--untracked-files=all") == ""


# -- 1. the production set applies, verifies, reports and rolls back ---------------------------


def test_active_fixes_apply_one_by_one_and_at_once_then_roll_back_byte_exact(
        catalog: Catalog, target: LocalTarget, catalog_tree: Path) -> None:
    # The revert of the dead fix is active too, but it applies only where the dead fix is
    # (tests below); every other active fix applies to the plain release.
    active = [f.name for f in catalog.dependency_order(
        [f.name for f in catalog.all() if f.status == "active" and not f.reverts])]
    assert active == PRODUCTION
    roots = roots_of(target)
    pristine = snapshot(*roots.values())

    for name in active:  # one call per fix, dependencies first
        result = api.apply(catalog, target, [name])
        assert result.ok and [f.name for f in result.fixes] == [name]
        assert_applied_and_verified(result.fixes[0], catalog.get(name), roots, pristine)
        if name == "dsv4-bf16-sizing":  # its python-script check ran, and passed
            assert [c.ok for c in result.fixes[0].verification
                    if c.kind == "python-script"] == [True]
    status = states(api.status(catalog, target))
    for name in active:
        assert status[name] == ("applied", catalog.get(name).version)
    assert status["hicache-index-k-sync"][0] == "not-applied"

    undone = api.rollback(catalog, target, active)
    assert [f.outcome for f in undone.fixes] == ["rolled-back"] * 3
    assert [f.name for f in undone.fixes] == list(reversed(active))  # dependents first
    assert_pristine(catalog_tree, roots, pristine)
    status = states(api.status(catalog, target))
    assert all(status[name][0] == "not-applied" for name in active)

    result = api.apply(catalog, target, active)  # all at once
    assert [f.name for f in result.fixes] == active
    for outcome in result.fixes:
        assert_applied_and_verified(outcome, catalog.get(outcome.name), roots, pristine)
    status = states(api.status(catalog, target))
    assert all(status[name][0] == "applied" for name in active)
    for name in reversed(active):  # one call per fix, dependents first
        assert api.rollback(catalog, target, [name]).fixes[0].outcome == "rolled-back"
    assert_pristine(catalog_tree, roots, pristine)


def test_the_sizing_script_check_decides_the_outcome(catalog: Catalog, target: LocalTarget,
                                                     catalog_tree: Path) -> None:
    """The python-script check is not a formality: re-run by ``api.verify`` after someone put
    the fp8 pricing back, it fails (and applying it passes, above)."""
    api.apply(catalog, target, ["dsv4-bf16-sizing"], with_deps=True)
    assert all(c.ok for c in api.verify(catalog, target, ["dsv4-bf16-sizing"])
               .fixes[0].verification)
    conf = catalog_tree / CONFIGURATOR
    text = conf.read_text()
    wrong = text.replace("return get_dsv4_bf16_index_k_bytes_per_token(self.indexer_head_dim)",
                         "return get_dsv4_indexer_bytes_per_token(self.indexer_head_dim, False)")
    assert wrong != text
    conf.write_text(wrong)
    with pytest.raises(VerificationFailed) as failed:
        api.verify(catalog, target, ["dsv4-bf16-sizing"])
    failures = failed.value.details["failures"]
    script = [f for f in failures if f["kind"] == "python-script"]
    assert len(script) == 1 and script[0]["fix"] == "dsv4-bf16-sizing"
    assert "pool allocates 256" in script[0]["detail"]  # the script's reason travels back


# -- 2. the dead fix ------------------------------------------------------------------------


def test_dead_fix_is_refused_unless_allowed_and_its_revert_removes_every_marker(
        catalog: Catalog, target: LocalTarget, catalog_tree: Path) -> None:
    roots = roots_of(target)
    pristine = snapshot(*roots.values())
    with pytest.raises(UsageError) as refused:
        api.apply(catalog, target, ["hicache-index-k-sync"], with_deps=True)
    message = str(refused.value)
    assert "hicache-index-k-sync" in message and "dead" in message
    assert "revert-hicache-index-k-sync" in message and "--allow-inactive" in message
    assert_pristine(catalog_tree, roots, pristine)
    assert not (catalog_tree / ".patchkit").exists()

    applied = api.apply(catalog, target, ["hicache-index-k-sync"], with_deps=True,
                        allow_inactive=True)
    assert [f.name for f in applied.fixes] == ["dsv4-bf16-index-k", "hicache-index-k-sync"]
    for outcome in applied.fixes:
        assert_applied_and_verified(outcome, catalog.get(outcome.name), roots, pristine)
    host = catalog_tree / HOST_POOL
    assert host.read_text().count("HICACHE_DBG") > 0

    # In a git checkout the revert undoes a commit; here the dead fix is only applied by
    # patchkit, so the revert is refused and says to roll the dead fix back instead.
    applied_bytes = snapshot(*roots.values())
    with pytest.raises(PreconditionFailed) as refused:
        api.apply(catalog, target, ["revert-hicache-index-k-sync"])
    assert "patchkit rollback hicache-index-k-sync" in str(refused.value)
    assert snapshot(*roots.values()) == applied_bytes

    api.rollback(catalog, target, ["hicache-index-k-sync", "dsv4-bf16-index-k"])
    assert_pristine(catalog_tree, roots, pristine)


# -- 3. a missing anchor ---------------------------------------------------------------------


def test_missing_anchor_is_refused_before_any_write(catalog: Catalog, target: LocalTarget,
                                                    catalog_tree: Path) -> None:
    """A release that moved the code the series expects: the sizing fix's anchor (a
    precondition without a label, so its pattern is its name) is gone."""
    anchor = "def _compressed_bytes_per_full_token(self, ratio: int) -> float:"
    assert any(c.get("pattern") == anchor and not c.get("name")
               for c in catalog.get("dsv4-bf16-sizing").preconditions)
    conf = catalog_tree / CONFIGURATOR
    text = conf.read_text()
    assert text.count(anchor) == 1
    conf.write_text(text.replace(anchor, anchor.replace("ratio: int", "ratio: int, page: int = 1")))
    git(catalog_tree, "commit", "-q", "-am", "move the per-token sizing (a later release)")
    roots = roots_of(target)
    before = snapshot(*roots.values())

    with pytest.raises(PreconditionFailed) as refused:
        api.apply(catalog, target, ["dsv4-bf16-sizing"], with_deps=True)
    message = str(refused.value)
    assert anchor in message and CONFIGURATOR in message
    assert "nothing was written" in message
    # The prerequisite's own preconditions held, yet it was not written either.
    failed = refused.value.details["failures"]
    assert [f["fix"] for f in failed] == ["dsv4-bf16-sizing"]
    assert snapshot(*roots.values()) == before
    assert git(catalog_tree, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""
    assert not (catalog_tree / ".patchkit").exists()


# -- 4. a missing prerequisite ---------------------------------------------------------------


def test_sizing_needs_its_prerequisite_or_with_deps(catalog: Catalog, target: LocalTarget,
                                                    catalog_tree: Path) -> None:
    roots = roots_of(target)
    pristine = snapshot(*roots.values())
    with pytest.raises(PreconditionFailed) as refused:
        api.apply(catalog, target, ["dsv4-bf16-sizing"])
    assert "dsv4-bf16-index-k" in str(refused.value)
    assert "apply" in str(refused.value)
    assert_pristine(catalog_tree, roots, pristine)

    result = api.apply(catalog, target, ["dsv4-bf16-sizing"], with_deps=True)
    assert [f.name for f in result.fixes] == ["dsv4-bf16-index-k", "dsv4-bf16-sizing"]
    for outcome in result.fixes:
        assert_applied_and_verified(outcome, catalog.get(outcome.name), roots, pristine)
    status = states(api.status(catalog, target))
    assert status["dsv4-bf16-index-k"][0] == status["dsv4-bf16-sizing"][0] == "applied"


# -- 5. the seed's production fork -----------------------------------------------------------


def test_seed_fixes_deploy_to_the_production_fork_in_one_call(
        catalog: Catalog, demo_fork: DemoFork, tmp_path: Path) -> None:
    fork = demo_fork  # build_fork's, on catalog_upstream: a copy of the session's (tests/fixtures/fleet.py)
    assert fork.release == CATALOG_RELEASE
    assert [name for name, _sha in fork.commits] == list(FORK_COMMITS)
    head = git(fork.sglang, "rev-parse", "HEAD").strip()
    assert head == fork.later  # a later commit touched memory_pool_host.py after the dead fix
    assert git(fork.sglang, "rev-parse", "HEAD^").strip() == fork.commits[-1][1]
    host = fork.sglang / HOST_POOL
    assert "HICACHE_DBG" in host.read_text()  # the dead fix is a commit of the fork
    assert LATER_EDIT[1] in host.read_text()
    target = LocalTarget(roots={"sglang": str(fork.sglang), "serve": str(fork.serve)})
    roots = roots_of(target)
    pristine = snapshot(*roots.values())

    result = api.apply(catalog, target, list(SEED_FIXES))
    assert result.ok
    assert sorted(f.name for f in result.fixes) == sorted(SEED_FIXES)
    for outcome in result.fixes:
        assert_applied_and_verified(outcome, catalog.get(outcome.name), roots, pristine)
    # the dead commit is undone and the later commit kept: not the seed's `git checkout C^`
    release_text = git(fork.sglang, "show", f"v{CATALOG_RELEASE}:{HOST_POOL}")
    assert host.read_text() == release_text.replace(*LATER_EDIT)
    revert = next(f for f in result.raw["fixes"] if f["name"] == "revert-hicache-index-k-sync")
    assert revert["revert"]["commit"] == fork.commits[-1][1]
    check = next(c for c in next(f for f in result.fixes
                                 if f.name == "revert-hicache-index-k-sync").preconditions
                 if c.kind == "git-revert")
    assert LATER_SUBJECT in check.detail and "patch-id of fix hicache-index-k-sync" in check.detail
    assert "hierarchical" not in (fork.serve / SERVE_SCRIPT.name).read_text()
    status = states(api.status(catalog, target))
    for name in SEED_FIXES:
        assert status[name] == ("applied", catalog.get(name).version)

    undone = api.rollback(catalog, target, list(SEED_FIXES))
    assert sorted(f.name for f in undone.fixes) == sorted(SEED_FIXES)
    assert all(f.outcome == "rolled-back" for f in undone.fixes)
    assert_pristine(fork.sglang, roots, pristine)
    assert git(fork.sglang, "rev-parse", "HEAD").strip() == head


def test_a_revert_fix_is_not_needed_on_a_release_that_never_had_the_commit(
        catalog_upstream, tmp_path: Path) -> None:
    """On a plain checkout of an older release the reverted file is another release's code,
    which may look partly like either side of the revert: status says not-needed, not drifted."""
    tree = checkout(catalog_upstream, SGLANG_VERSION, tmp_path / "old")
    target = LocalTarget(roots={"sglang": str(tree)}, description="plain old release")
    [fix] = [s for s in api.status(Catalog(REPO), target).status
             if s.name == "revert-hicache-index-k-sync"]
    assert fix.state == "not-needed", fix
