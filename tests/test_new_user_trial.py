"""Rough edges a fresh-clone new-user trial hit (issue 25): sync on the demo fork, the shipped
catalog of a clone kept read-only, depends_on through export and import, and manifest errors
named in a user's words with file and line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.targets import LocalTarget
from patchkit.upstream import UpstreamRepo

REPO = Path(__file__).resolve().parent.parent
INDEX_K, SIZING = "dsv4-bf16-index-k", "dsv4-bf16-sizing"


@pytest.mark.network
def test_sync_on_the_demo_fork_leaves_out_the_unrecorded_dependency_and_applies_the_rest(
        catalog_upstream: UpstreamRepo, tmp_path: Path) -> None:
    """The demo fork carries dsv4-bf16-index-k as a commit of its own (present, unrecorded):
    sync leaves it out and its dependant is accepted on it, as `apply` accepts it."""
    from patchkit.demo import SEED_FIXES, build_fork

    catalog = Catalog(REPO)
    fork = build_fork(tmp_path / "demo", catalog, upstream=catalog_upstream)
    target = LocalTarget({"sglang": str(fork.sglang), "serve": str(fork.serve)}, sys.executable,
                         "fork")
    for dry_run in (True, False):
        result = api.sync(catalog, target, dry_run=dry_run)
        outcomes = {f.name: f.outcome for f in result.fixes}
        assert result.ok and outcomes[INDEX_K] == "present-unrecorded", outcomes
        assert {outcomes[n] for n in SEED_FIXES} == {"would-apply" if dry_run else "applied"}
        sizing = next(f for f in result.fixes if f.name == SIZING)
        requires = [p for p in sizing.preconditions if p.kind == "requires"]
        assert [p.detail for p in requires] == ["present in the files, not recorded by patchkit"]
    states = {s.name: s.state for s in api.status(catalog, target).status}
    assert states[INDEX_K] == "present-unrecorded" and states[SIZING] == "applied"
