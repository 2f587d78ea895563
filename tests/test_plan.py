"""Engine requests from a catalog: their exact shape, fix selection, and a real engine run."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import patchkit
from patchkit.catalog import Catalog
from patchkit.errors import UsageError
from patchkit.request_builder import build_request

SAMPLES = Path(__file__).parent / "samples"
ROOTS = {"sglang": "/srv/sglang", "serve": "/srv/serve"}


@pytest.fixture
def catalog() -> Catalog:
    return Catalog(SAMPLES / "catalog")


def names(fixes: list) -> list[str]:
    return [f.name for f in fixes]


def test_request_matches_the_reviewed_sample(catalog: Catalog) -> None:
    fixes = catalog.apply_order(["pool-guard"], with_deps=True)
    request = build_request(catalog, fixes, op="apply", roots=ROOTS, state_root="sglang",
                            python="/usr/bin/python3", dry_run=True)
    expected = json.loads((SAMPLES / "apply-pool-guard.request.json").read_text())
    assert request == expected
    assert json.loads(json.dumps(request)) == request  # plain JSON, nothing else


def test_request_carries_hashes_roots_and_scripts(catalog: Catalog) -> None:
    request = build_request(catalog, [catalog.get("index-k-bytes"), catalog.get("pool-guard")],
                            op="verify", roots=ROOTS, state_root="serve", python=None,
                            force=True, lock_timeout=5)
    assert (request["op"], request["force"], request["dry_run"]) == ("verify", True, False)
    assert request["state_root"] == "serve" and request["lock_timeout"] == 5.0
    first, second = request["fixes"]
    for fix, fix_request in ((catalog.get("index-k-bytes"), first),
                             (catalog.get("pool-guard"), second)):
        assert [{k: v for k, v in p.items() if k != "diff_sha256"}
                for p in fix_request["patches"]] == [
            {"file": p.file, "sha256": hashlib.sha256(p.path.read_bytes()).hexdigest()}
            for p in fix.patches]
        # the change's own digest (docs/interop.md, "Round trips"): another patch, another one
        digests = [p["diff_sha256"] for p in fix_request["patches"]]
        assert all(len(d) == 64 for d in digests) and len(set(digests)) == len(digests)
    script = SAMPLES / "catalog/patches/index-k-bytes/checks/bytes_per_token.py"
    assert first["scripts"] == {"checks/bytes_per_token.py": script.read_text()}
    assert first["release"] == {"root": "sglang", "versions": ["0.5.20", "0.5.21"]}
    assert [f["root"] for f in second["files"]] == ["sglang", "serve"]
    assert second["requires"] == ["index-k-bytes"]
    assert second["rollback"] == {"strategy": "reverse"}


def test_empty_releases_means_no_release_precondition(catalog: Catalog) -> None:
    request = build_request(catalog, [catalog.get("old-index-k")], op="apply", roots=ROOTS,
                            state_root="sglang", python=None)
    assert request["fixes"][0]["release"] is None


def test_roots_the_fixes_need_must_be_defined(catalog: Catalog) -> None:
    with pytest.raises(UsageError, match="uses the root\\(s\\) serve") as info:
        build_request(catalog, [catalog.get("pool-guard")], op="apply",
                      roots={"sglang": "/srv/sglang"}, state_root="sglang", python=None)
    manifest = catalog.get("pool-guard").manifest_path
    assert info.value.details == {"fix": "pool-guard", "roots": ["serve"], "file": str(manifest)}
    line = next(i for i, t in enumerate(manifest.read_text().splitlines(), 1)
                if t.replace(" ", "") == 'root="serve"')
    assert f"({manifest}:{line})" in info.value.message  # where the manifest names the root
    # status looks at every fix of the catalog; a root a fix needs is not required for that.
    status = build_request(catalog, catalog.all(), op="status", roots={"sglang": "/s"},
                           state_root="sglang", python=None)
    assert names(catalog.all()) == [f["name"] for f in status["fixes"]]
    with pytest.raises(UsageError, match="state root 'state'"):
        build_request(catalog, [], op="status", roots=ROOTS, state_root="state", python=None)
    with pytest.raises(UsageError, match="unknown operation 'deploy'"):
        build_request(catalog, [], op="deploy", roots=ROOTS, state_root="sglang", python=None)


def test_selection_for_apply_and_rollback(catalog: Catalog) -> None:
    assert names(catalog.apply_order(["pool-guard"])) == ["pool-guard"]
    assert names(catalog.apply_order(["pool-guard", "index-k-bytes"])) == [
        "index-k-bytes", "pool-guard"]
    assert names(catalog.rollback_order(["index-k-bytes", "pool-guard"])) == [
        "pool-guard", "index-k-bytes"]
    assert names(catalog.rollback_order(["index-k-bytes"], with_dependents=True)) == [
        "pool-guard", "index-k-bytes"]


def test_inactive_fix_is_refused_naming_what_replaced_it(catalog: Catalog) -> None:
    with pytest.raises(UsageError) as info:
        catalog.apply_order(["old-index-k"])
    message = info.value.message
    assert "'old-index-k' is superseded" in message and "replaced by pool-guard" in message
    assert info.value.details == {"fix": "old-index-k", "status": "superseded"}
    allowed = catalog.apply_order(["old-index-k"], allow_inactive=True)
    assert names(allowed) == ["old-index-k"]


def test_plan_applies_through_the_engine_like_git_apply(catalog: Catalog, tmp_path: Path) -> None:
    """The contract end to end: the planned request, run by the engine on a real tree,
    writes what `git apply` of the same series writes, and runs the shipped checks."""
    from patchkit import engine

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(SAMPLES / "tree", ours)
    shutil.copytree(SAMPLES / "tree", theirs)
    fixes = catalog.apply_order(["pool-guard"], with_deps=True)
    roots = {"sglang": str(ours / "sglang"), "serve": str(ours / "serve")}
    result = engine.run(build_request(catalog, fixes, op="apply", roots=roots,
                                      state_root="sglang", python=None))
    assert result["ok"], result["error"]
    assert [f["outcome"] for f in result["fixes"]] == ["applied", "applied"]
    assert all(c["ok"] for f in result["fixes"] for c in f["verification"])
    for fix in fixes:
        for patch in fix.patches:
            subprocess.run(["git", "apply", str(patch.path.resolve())], check=True,
                           cwd=theirs / patch.root)
    for name in ("sglang/python/sglang/srt/pool.py", "serve/serve.sh"):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes()


def test_the_shipped_catalog_is_valid_and_plans() -> None:
    top = Path(patchkit.__file__).resolve().parent.parent
    if not any((top / "manifests").glob("*.toml")):
        pytest.skip("the project ships no fixes yet")
    shipped = Catalog(top)
    fixes = shipped.validate()
    roots = {root: f"/srv/{root}" for fix in fixes for root in fix.roots}
    roots.setdefault("sglang", "/srv/sglang")
    request = build_request(shipped, shipped.dependency_order(names(fixes)), op="verify",
                            roots=roots, state_root="sglang", python=None)
    assert [f["name"] for f in request["fixes"]] == names(shipped.dependency_order(names(fixes)))
    assert all(f["files"] for f in request["fixes"])


def test_a_prerequisite_outside_the_request_travels_as_a_dependency(catalog: Catalog) -> None:
    # On a fork the prerequisite may be a commit, not a patchkit record: the engine needs its
    # hunks to tell whether it is present, so the request carries it without applying it.
    fixes = catalog.apply_order(["pool-guard"])
    request = build_request(catalog, fixes, op="apply", roots=ROOTS, state_root="sglang",
                            python=None)
    assert [f["name"] for f in request["fixes"]] == ["pool-guard"]
    assert [d["name"] for d in request["dependencies"]] == ["index-k-bytes"]
    assert request["dependencies"][0]["files"], "the dependency's hunks are needed to detect it"
