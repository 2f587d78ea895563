"""Dogfood (issue 6): the shipped catalog was rebased from 0.5.21 onto 0.5.23 with patchkit.

The committed catalog must show it: every SGLang fix is based on 0.5.23 with a new version
and a changelog entry "Rebased from 0.5.21 onto 0.5.23", and the previous version is still
reachable in the catalog's git history (``patchkit log``, ``patchkit diff --versions``).
On the real releases, the fixes apply and verify on 0.5.23 and are refused on 0.5.21
before anything is written; and ``patchkit rebase`` run again from the 0.5.21 versions,
resolving each stop the way the rebase commit says, lands the same files on 0.5.23.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api, rebase
from patchkit.catalog import lineage
from patchkit.catalog import Catalog
from patchkit.errors import EXIT_CHECK_FAILED, PreconditionFailed
from patchkit.targets import LocalTarget
from patchkit.upstream import UpstreamRepo
from tests.fixtures.sglang import CATALOG_RELEASE, SGLANG_VERSION, checkout

REPO = Path(__file__).resolve().parent.parent
REBASE_SUBJECT = "rebase the shipped fixes onto SGLang 0.5.23 with patchkit rebase"
#: The fixes tied to an SGLang release (prefill-hicache-off patches a serve script).
REBASED = ("dsv4-bf16-index-k", "hicache-index-k-sync", "revert-hicache-index-k-sync",
           "dsv4-bf16-sizing")
PRODUCTION = ("dsv4-bf16-index-k", "dsv4-bf16-sizing")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


def catalog_history_or_skip() -> str:
    """The sha of the rebase commit; skips where the catalog has no full git history."""
    probe = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO,
                           capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != "false":
        pytest.skip("the catalog is not a full git clone: its history holds version 1")
    sha = git(REPO, "log", "--format=%H", "--fixed-strings", f"--grep={REBASE_SUBJECT}",
              "--", "manifests").split()
    assert len(sha) == 1, "exactly one commit rebased the shipped catalog"
    return sha[0]


def patchkit(*args: str) -> tuple[int, dict]:
    """``patchkit ARGS --json`` as a user runs it: its exit code and its JSON."""
    proc = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(REPO), *args,
                           "--json"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return proc.returncode, json.loads(proc.stdout)


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under root, .git included (a refusal must not touch the repo)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# -- the committed catalog ---------------------------------------------------------------------


def test_the_catalog_is_based_on_0523_with_a_rebase_entry_from_0521() -> None:
    catalog = Catalog(REPO)
    for name in REBASED:
        fix = catalog.get(name)
        assert fix.upstream.base_release == CATALOG_RELEASE, name
        assert fix.upstream.releases == (CATALOG_RELEASE,), name
        # the rebase from 0.5.21, then the 0.5.22 variant made with rebase (docs/manifest.md)
        at = next(i for i, e in enumerate(fix.changelog) if e.summary.startswith(
            f"Rebased from {SGLANG_VERSION} onto {CATALOG_RELEASE}: "))
        before, after = fix.changelog[at - 1], fix.changelog[at]
        assert (after.version, after.base_release) == (before.version + 1, CATALOG_RELEASE), name
        assert before.base_release == SGLANG_VERSION, name
        assert [(v.version, v.upstream.releases) for v in fix.all_variants()] == [
            (fix.version, (CATALOG_RELEASE,)), (fix.version - 1, ("0.5.22",))], name
    assert catalog.get("hicache-index-k-sync").status == "dead"  # rebased, still dead
    serve_only = catalog.get("prefill-hicache-off")
    assert (serve_only.version, serve_only.upstream.releases) == (1, ())


def test_log_and_diff_reach_the_0521_versions_through_the_catalog_history() -> None:
    rebase_sha = catalog_history_or_skip()
    lin = lineage.build(Catalog(REPO))
    for name in REBASED:
        versions = lin.get(name).versions
        at = next(i for i, v in enumerate(versions) if v.rebased_from == SGLANG_VERSION)
        old, new = versions[at - 1], versions[at]
        assert (old.base_release, new.base_release, new.rebased_from) == (
            SGLANG_VERSION, CATALOG_RELEASE, SGLANG_VERSION), name
        assert old.commits, f"{name}: no commit of version {old.version} in the history"
        assert rebase_sha in {c.sha for c in new.commits}, name

    # version 1 of the series is read from the history, and differs where 0.5.23 moved
    v1 = rebase.series_of_version(Catalog(REPO), "dsv4-bf16-sizing", 1)
    assert list(v1) == ["0001-count-bf16-index-k-bytes.patch"]
    assert "get_draft_swa_ring_size" not in v1["0001-count-bf16-index-k-bytes.patch"]
    code, out = patchkit("diff", "dsv4-bf16-sizing", "--versions", "1", "2")
    assert code == 0
    assert "+     get_draft_swa_ring_size," in out["diff"]  # 0.5.23's line, now context
    # a version a [[variants]] entry keeps (v3, for 0.5.22) is read from its directory: log
    # and show list it, and it is the diff a fleet midway through an upgrade wants
    v3 = rebase.series_of_version(Catalog(REPO), "dsv4-bf16-sizing", 3)
    assert v3 == {f: (REPO / "patches" / "dsv4-bf16-sizing" / "0.5.22" / f).read_text() for f in v3}
    code, out = patchkit("diff", "dsv4-bf16-sizing", "--versions", "3", "4")
    assert code == 0, out
    assert "+     get_draft_swa_ring_size," in out["diff"]  # 0.5.23's line, not in 0.5.22


# -- the real releases ------------------------------------------------------------------------


@pytest.mark.network
def test_the_rebased_fixes_apply_and_verify_on_the_real_0523(catalog_tree: Path) -> None:
    assert git(catalog_tree, "describe", "--tags").strip() == f"v{CATALOG_RELEASE}"
    code, out = patchkit("apply", *PRODUCTION, "--target", str(catalog_tree))
    assert code == 0, out
    catalog = Catalog(REPO)
    assert [(f["name"], f["outcome"], f["version"]) for f in out["fixes"]] == [
        (name, "applied", catalog.get(name).version) for name in PRODUCTION]
    for fix in out["fixes"]:
        assert all(c["ok"] for c in fix["preconditions"]), fix["preconditions"]
        assert [c["kind"] for c in fix["verification"]] == [
            c.kind for c in catalog.get(fix["name"]).verification]
        assert all(c["ok"] for c in fix["verification"]), fix["verification"]
    assert [c["ok"] for c in out["fixes"][1]["verification"]
            if c["kind"] == "python-script"] == [True]
    # what that check counted on 0.5.23: the c4 indexer term doubles with bf16 index-K
    script = REPO / "patches" / "dsv4-bf16-sizing" / "checks" / "bytes_per_token.py"
    counted = subprocess.run([sys.executable, str(script), str(catalog_tree)],
                             capture_output=True, text=True)
    assert counted.returncode == 0 and "33.0 (fp8) -> 64.0 (bf16)" in counted.stdout


@pytest.mark.network
@pytest.mark.parametrize("names", [("dsv4-bf16-index-k",),
                                   ("dsv4-bf16-sizing", "--with-deps"),
                                   ("hicache-index-k-sync", "--with-deps", "--allow-inactive")],
                         ids=["index-k", "sizing", "dead-fix"])
def test_the_rebased_fixes_are_refused_on_the_real_0521(sglang_tree: Path,
                                                        names: tuple[str, ...]) -> None:
    assert git(sglang_tree, "describe", "--tags").strip() == f"v{SGLANG_VERSION}"
    before = snapshot(sglang_tree)
    code, out = patchkit("apply", *names, "--target", str(sglang_tree))
    assert code == EXIT_CHECK_FAILED
    assert out["ok"] is False and out["error"]["type"] == PreconditionFailed.__name__
    failures = out["error"]["details"]["failures"]
    released = [f for f in failures if f["kind"] == "release"]
    # every fix of the run (dependencies too) fails its release precondition; a dependent
    # also reports its unmet dependency, and nothing else fails
    assert {f["fix"] for f in released} == {"dsv4-bf16-index-k", names[0]}
    assert {f["kind"] for f in failures} <= {"release", "requires"}
    assert all(f"release {SGLANG_VERSION}" in f["detail"] and CATALOG_RELEASE in f["detail"]
               for f in released)
    assert snapshot(sglang_tree) == before  # nothing written, not even patchkit's state


def keep_both(path: Path) -> None:
    """The resolution of the add/add stops: the release's lines, then the fix's (diff3)."""
    out, side = [], None
    for line in path.read_text().split("\n"):
        if line.startswith("<<<<<<< "):
            side = "release"
        elif line.startswith("||||||| "):
            side = "base"
        elif line.startswith("=======") and side:
            side = "fix"
        elif line.startswith(">>>>>>> "):
            side = None
        elif side != "base":
            out.append(line)
    path.write_text("\n".join(out))


CATALOG_TAG = f"v{CATALOG_RELEASE}"


def applied_files(catalog: Catalog, tree: Path) -> dict[str, bytes]:
    api.apply(catalog, LocalTarget({"sglang": str(tree)}), list(PRODUCTION))
    changed = git(tree, "diff", "--name-only").split()
    return {path: (tree / path).read_bytes() for path in changed}


@pytest.mark.network
def test_patchkit_rebase_from_the_0521_versions_lands_the_committed_files(
        catalog_upstream: UpstreamRepo, tmp_path: Path) -> None:
    """The committed series are what `patchkit rebase --onto 0.5.23` makes of the 0.5.21
    versions with every stop resolved by keeping both sides."""
    rebase_sha = catalog_history_or_skip()
    old = tmp_path / "catalog"
    old.mkdir()
    archive = subprocess.run(["git", "archive", f"{rebase_sha}^", "manifests", "patches"],
                             cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    catalog = Catalog(old)
    assert catalog.get("dsv4-bf16-index-k").upstream.base_release == SGLANG_VERSION

    # every release-tied fix, the dead one and its revert too, in one run and with no
    # manifest edited: the dogfood had to edit two manifests for a second run
    report = rebase.start(catalog, CATALOG_RELEASE, list(REBASED), upstream=catalog_upstream)
    stops = []
    while not report.done:
        stops.append((report.stopped, tuple(report.conflicted)))
        for path in report.conflicted:
            keep_both(Path(report.worktree) / path)
        report = rebase.continue_(catalog, upstream=catalog_upstream)
    host = "python/sglang/srt/mem_cache/memory_pool_host.py"
    assert stops == [
        ("dsv4-bf16-index-k", ("python/sglang/srt/environ.py",)),
        ("hicache-index-k-sync", (host,)),
        ("revert-hicache-index-k-sync", (host,)),
        ("dsv4-bf16-sizing", ("python/sglang/srt/model_executor/pool_configurator.py",))]
    assert not (old / rebase.STATE_DIR).exists()

    ours = applied_files(Catalog(old), checkout(catalog_upstream, CATALOG_RELEASE, tmp_path / "a"))
    shipped = applied_files(Catalog(REPO),
                            checkout(catalog_upstream, CATALOG_RELEASE, tmp_path / "b"))
    assert sorted(ours) == sorted(shipped) == sorted([
        "python/sglang/srt/environ.py",
        "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py",
        "python/sglang/srt/model_executor/pool_configurator.py"])
    assert ours == shipped
    for name in REBASED:  # the version that rebase made (the shipped catalog went on to 0.5.22)
        made = Catalog(old).get(name).version
        assert Catalog(REPO).get(name).changelog[made - 1].summary.startswith(
            f"Rebased from {SGLANG_VERSION} onto {CATALOG_RELEASE}: "), name

    # The fork of the incident: the dead fix committed on the release, then reverted. The
    # rebased revert must leave exactly what the shipped one leaves (0.5.23's host pool);
    # the dead fix itself may order its imports differently (keep-both vs by hand).
    def fork(cat: Catalog, tree: Path) -> dict[str, bytes]:
        target = LocalTarget({"sglang": str(tree)})
        api.apply(cat, target, ["dsv4-bf16-index-k"])
        api.apply(cat, target, ["hicache-index-k-sync"], allow_inactive=True, commit=True)
        # the incident's fork carried the dead fix as a commit of its own, with no record of
        # patchkit's (where patchkit applied it, the revert is refused: roll it back instead)
        state_file = tree / ".patchkit" / "state.json"
        state = json.loads(state_file.read_text())
        state["fixes"] = [f for f in state["fixes"] if f["name"] != "hicache-index-k-sync"]
        state_file.write_text(json.dumps(state))
        dead = set(git(tree, "diff", "--name-only", CATALOG_TAG).split())
        api.apply(cat, target, ["revert-hicache-index-k-sync"])
        changed = git(tree, "diff", "--name-only", CATALOG_TAG).split()
        return dead, {path: (tree / path).read_bytes() for path in changed}

    dead_ours, ours = fork(Catalog(old), checkout(catalog_upstream, CATALOG_RELEASE, tmp_path / "c"))
    dead_shipped, shipped = fork(Catalog(REPO),
                                 checkout(catalog_upstream, CATALOG_RELEASE, tmp_path / "d"))
    assert host in dead_ours and dead_ours == dead_shipped
    assert host not in ours and ours == shipped
