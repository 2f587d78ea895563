"""`new` and `refresh` leave out what applied fixes wrote (issue 25, item 3).

A real 0.5.23 checkout with the shipped ``dsv4-bf16-sizing`` (and the fix it depends on) applied
by patchkit, then an author's own edit: the checkout's record (``.patchkit/state.json``) says
which changed files are the applied fixes', so a new fix captures only the author's edit and
says what it left out; ``--include-applied`` takes them too.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.targets import LocalTarget

from .test_authoring import CONFIGURATOR, flat, patchkit

REPO = Path(__file__).resolve().parent.parent
POOL = "python/sglang/srt/mem_cache/memory_pool_host.py"
OWNED = {CONFIGURATOR: "dsv4-bf16-sizing", "python/sglang/srt/environ.py": "dsv4-bf16-index-k",
         "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py": "dsv4-bf16-index-k"}


def series_paths(catalog: Path, name: str) -> set[str]:
    fix = Catalog(catalog).get(name)
    return {line[6:] for ref in fix.patches for line in ref.path.read_text().splitlines()
            if line.startswith("+++ b/")}


@pytest.mark.network
def test_new_and_refresh_leave_out_files_applied_fixes_wrote(catalog_tree: Path, tmp_path: Path) -> None:
    applied = api.apply(Catalog(REPO), LocalTarget(roots={"sglang": str(catalog_tree)}),
                        ["dsv4-bf16-sizing"], with_deps=True)
    assert [f.outcome for f in applied.fixes] == ["applied", "applied"]
    pool = catalog_tree / POOL
    pool.write_text(pool.read_text().replace("Logical anchors own no backing buffers",
                                             "Logical anchors own no host buffers"))
    catalog = tmp_path / "catalog"
    (catalog / "manifests").mkdir(parents=True)

    dry = patchkit(catalog, "new", "host-pool-docs", "--from", str(catalog_tree), "--dry-run",
                   "--json")
    assert dry.exit_code == 0, dry.output
    data = json.loads(dry.output)
    assert data["files"] == [POOL]
    assert {a["path"]: a["fix"] for a in data["applied"]} == OWNED
    assert not set(OWNED) & set(data["ignored"])

    made = patchkit(catalog, "new", "host-pool-docs", "--from", str(catalog_tree), "--no-commit")
    assert made.exit_code == 0, made.output
    out = flat(made.output)
    assert "left out 3 file(s) written by applied fixes" in out and "--include-applied" in out
    assert f"{CONFIGURATOR} (dsv4-bf16-sizing)" in out
    assert series_paths(catalog, "host-pool-docs") == {POOL}

    # refresh: a file an applied fix wrote, named to be added, is left out the same way
    again = patchkit(catalog, "refresh", "host-pool-docs", CONFIGURATOR, "--from",
                     str(catalog_tree), "--no-commit", "--dry-run", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["files"] == [POOL]
    # every file applied fixes wrote is said as theirs, named or not: none is "ignored" with
    # the advice to name it as a PATH, which would be refused
    again_data = json.loads(again.output)
    assert {a["path"]: a["fix"] for a in again_data["applied"]} == OWNED
    assert not set(OWNED) & set(again_data["ignored"])
    named = patchkit(catalog, "new", "pool-only", POOL, "--from", str(catalog_tree), "--dry-run",
                     "--json")
    assert named.exit_code == 0, named.output
    named_data = json.loads(named.output)
    assert named_data["files"] == [POOL] and not set(OWNED) & set(named_data["ignored"])
    assert {a["path"]: a["fix"] for a in named_data["applied"]} == OWNED
    taken = patchkit(catalog, "refresh", "host-pool-docs", CONFIGURATOR, "--from",
                     str(catalog_tree), "--no-commit", "--include-applied")
    assert taken.exit_code == 0, taken.output
    assert series_paths(catalog, "host-pool-docs") == {POOL, CONFIGURATOR}

    # only files applied fixes wrote: nothing to capture, said with the way to take them
    subprocess.run(["git", "checkout", "-q", "--", POOL], cwd=catalog_tree, check=True)
    none = patchkit(catalog, "new", "other", "--from", str(catalog_tree), "--no-commit")
    assert none.exit_code == 2
    assert "written by an applied fix" in flat(none.output) and "--include-applied" in flat(none.output)
    assert not (catalog / "manifests" / "other.toml").exists()
    both = patchkit(catalog, "new", "other", "--from", str(catalog_tree), "--no-commit",
                    "--include-applied", "--dry-run", "--json")
    assert both.exit_code == 0, both.output
    assert set(json.loads(both.output)["files"]) == set(OWNED)


def test_a_capture_from_a_serve_checkout_reads_the_targets_record_and_needs_no_release(
        tmp_path: Path) -> None:
    """The record of fixes applied to a serve checkout is the target's (its sglang tree's
    .patchkit/): `new --from SERVE --root serve` took what pool-guard wrote into serve.sh as
    the author's change, without a word; and its manifest checked an SGLang release, so the
    fix could not be applied to the serve root alone. Now --target SGLANG leaves pool-guard's
    file out (a warning says so without it), and the series checks no release."""
    import shutil

    from .test_remote import SAMPLES, make_tree

    roots = make_tree(tmp_path / "tree")
    serve = Path(roots["serve"])
    (serve / "env.sh").write_text("export SGLANG_PORT=30000\n")
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=Ops", "-c", "user.email=ops@example.com", "commit", "-qm", "serve"]):
        subprocess.run(["git", *args], cwd=serve, check=True)
    sample = tmp_path / "samples"
    shutil.copytree(SAMPLES / "catalog", sample)
    api.apply(Catalog(sample), LocalTarget(roots=roots), ["pool-guard"], with_deps=True)
    (serve / "env.sh").write_text("export SGLANG_PORT=30001\n")  # the author's own change
    catalog = tmp_path / "catalog"
    (catalog / "manifests").mkdir(parents=True)

    blind = patchkit(catalog, "new", "port", "--from", str(serve), "--root", "serve",
                     "--dry-run", "--json")
    assert blind.exit_code == 0, blind.output
    data = json.loads(blind.output[blind.output.index("{"):])
    assert sorted(data["files"]) == ["env.sh", "serve.sh"]
    assert any("pass --target SGLANG" in w for w in data["warnings"])

    made = patchkit(catalog, "new", "port", "--from", str(serve), "--root", "serve", "--target",
                    roots["sglang"], "--no-commit", "--json")
    assert made.exit_code == 0, made.output
    data = json.loads(made.output[made.output.index("{"):])
    assert data["files"] == ["env.sh"] and data["applied"] == [{"path": "serve.sh", "fix": "pool-guard"}]
    assert not any("--target SGLANG" in w for w in data["warnings"])
    fix = Catalog(catalog).get("port")
    assert fix.upstream.releases == () and [p.root for p in fix.patches] == ["serve"]

    fresh = make_tree(tmp_path / "fresh")  # the serve root alone is the whole target
    Path(fresh["serve"], "env.sh").write_text("export SGLANG_PORT=30000\n")
    result = api.apply(Catalog(catalog), LocalTarget(roots={"serve": fresh["serve"]}), ["port"])
    assert [f.outcome for f in result.fixes] == ["applied"]
    assert Path(fresh["serve"], "env.sh").read_text() == "export SGLANG_PORT=30001\n"


def host_pool_docs(tree: Path, tmp_path: Path) -> Path:
    """A catalog holding `host-pool-docs` v1, made with `new` from an edit of ``tree``'s host
    pool file, the edit then taken back out of ``tree``."""
    pool = tree / POOL
    pool.write_text(pool.read_text().replace("Logical anchors own no backing buffers",
                                             "Logical anchors own no host buffers"))
    catalog = tmp_path / "catalog"
    (catalog / "manifests").mkdir(parents=True)
    made = patchkit(catalog, "new", "host-pool-docs", "--from", str(tree), "--no-commit")
    assert made.exit_code == 0, made.output
    subprocess.run(["git", "checkout", "-q", "--", POOL], cwd=tree, check=True)
    return catalog


@pytest.mark.network
def test_refresh_from_the_tree_a_fix_is_applied_in_leaves_an_upgrade_that_writes_nothing(
        catalog_tree: Path, tmp_path: Path) -> None:
    """The seed's story: a fix applied on a server, then edited there by hand, then captured
    as the fix's next version with `refresh --from` that tree. The tree's record still says
    v1, its files are v2's result: status says outdated (not drifted), refresh says how to
    record it, and `apply` upgrades without --force, writing no byte."""
    pool = catalog_tree / POOL
    original = pool.read_text()
    catalog = host_pool_docs(catalog_tree, tmp_path)
    applied = patchkit(catalog, "apply", "host-pool-docs", "--target", str(catalog_tree))
    assert applied.exit_code == 0, applied.output
    pool.write_text(pool.read_text().replace("# ---- V4 Compressed KV Host Pools ----",
                                             "# ---- V4 compressed KV host pools ----"))
    edited = pool.read_bytes()
    refreshed = patchkit(catalog, "refresh", "host-pool-docs", "--from", str(catalog_tree),
                         "--no-commit")
    assert refreshed.exit_code == 0, refreshed.output
    assert (f"host-pool-docs v1 is applied in {catalog_tree}" in flat(refreshed.output)
            and f"patchkit apply host-pool-docs --target {catalog_tree} records v2" in flat(refreshed.output))
    seen = patchkit(catalog, "status", "--target", str(catalog_tree), "--json")
    assert seen.exit_code == 0, seen.output
    [fix] = json.loads(seen.output)["status"]["fixes"]
    assert (fix["state"], fix["version"], fix["catalog_version"]) == ("outdated", 1, 2)
    assert "hold v2's change already" in fix["detail"]
    plain = patchkit(catalog, "status", "--target", str(catalog_tree))
    assert "outdated (v1 applied, v2 in the catalog)" in flat(plain.output)
    assert "; the files hold v2's change already" in flat(plain.output)
    assert "(drifted)" not in plain.output  # the row says what they hold
    told = patchkit(catalog, "apply", "host-pool-docs", "--target", str(catalog_tree),
                    "--dry-run")
    assert told.exit_code == 0, told.output
    assert "would-upgrade host-pool-docs v1 -> v2" in flat(told.output)
    assert "the files held v2's change already" in flat(told.output)
    upgraded = patchkit(catalog, "apply", "host-pool-docs", "--target", str(catalog_tree),
                        "--json")
    assert upgraded.exit_code == 0, upgraded.output
    out = json.loads(upgraded.output)["fixes"][0]
    assert (out["outcome"], out["from_version"], out["version"]) == ("upgraded", 1, 2)
    assert pool.read_bytes() == edited
    again = json.loads(patchkit(catalog, "status", "--target", str(catalog_tree),
                                "--json").output)["status"]["fixes"][0]
    assert (again["state"], again["version"]) == ("applied", 2)
    back = patchkit(catalog, "rollback", "host-pool-docs", "--target", str(catalog_tree))
    assert back.exit_code == 0, back.output
    assert pool.read_text() == original


@pytest.mark.network
def test_refresh_where_the_fix_is_committed_or_grows_a_file_says_what_works(
        catalog_tree: Path, tmp_path: Path) -> None:
    """Two cases the no-write upgrade does not cover. Applied with --commit, HEAD holds v1, and
    a capture against HEAD would drop v1's change from v2: refused, nothing written. A v2 that
    adds a file v1 did not change: the upgrade checks that file against HEAD, so refresh says
    to put it back first instead of promising an upgrade that writes nothing."""
    subprocess.run(["git", "config", "user.email", "a@example.org"], cwd=catalog_tree, check=True)
    subprocess.run(["git", "config", "user.name", "A U Thor"], cwd=catalog_tree, check=True)
    catalog = host_pool_docs(catalog_tree, tmp_path)
    version = catalog_tree / "python/sglang/version.py"

    committed = patchkit(catalog, "apply", "host-pool-docs", "--target", str(catalog_tree),
                         "--commit")
    assert committed.exit_code == 0, committed.output
    with open(version, "a") as fh:
        fh.write("# v2\n")
    before = {p: p.read_bytes() for p in (catalog / "patches" / "host-pool-docs").iterdir()}
    refused = patchkit(catalog, "refresh", "host-pool-docs", "python/sglang/version.py",
                       "--from", str(catalog_tree), "--no-commit")
    assert refused.exit_code == 2, refused.output
    said = flat(refused.output)
    assert "with --commit: HEAD holds its change" in said, said
    assert "patchkit rollback host-pool-docs" in said, said
    assert {p: p.read_bytes() for p in (catalog / "patches" / "host-pool-docs").iterdir()} == before
    back = patchkit(catalog, "rollback", "host-pool-docs", "--target", str(catalog_tree))
    assert back.exit_code == 0, back.output

    subprocess.run(["git", "checkout", "-q", "--", "python/sglang/version.py"], cwd=catalog_tree,
                   check=True)
    assert patchkit(catalog, "apply", "host-pool-docs", "--target",
                    str(catalog_tree)).exit_code == 0
    with open(version, "a") as fh:
        fh.write("# v2\n")
    grown = patchkit(catalog, "refresh", "host-pool-docs", "python/sglang/version.py",
                     "--from", str(catalog_tree), "--no-commit")
    assert grown.exit_code == 0, grown.output
    said = flat(grown.output)
    assert "writing nothing" not in said, said
    assert "git checkout -- python/sglang/version.py" in said, said
    subprocess.run(["git", "checkout", "-q", "--", "python/sglang/version.py"], cwd=catalog_tree,
                   check=True)
    upgraded = patchkit(catalog, "apply", "host-pool-docs", "--target", str(catalog_tree))
    assert upgraded.exit_code == 0, upgraded.output
    assert version.read_text().endswith("# v2\n")


@pytest.mark.network
def test_a_fix_on_top_of_an_applied_fix_in_the_same_file_is_captured_as_its_advice_says(
        catalog_upstream, catalog_tree: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A fix building on an applied fix's lines in the same file: `new` says to apply that fix
    with --commit first, so HEAD holds it, then --include-applied; done so, the new fix's patch
    holds only its own lines, and with depends_on it applies after that fix on a fresh tree
    (a new-user trial found no route the messages named that worked)."""
    from patchkit.authoring import init_catalog
    from tests.fixtures.sglang import checkout

    shipped = Catalog(REPO)
    tree = LocalTarget(roots={"sglang": str(catalog_tree)})
    configurator = catalog_tree / CONFIGURATOR
    marker = "def _compressed_bytes_per_full_token(self, ratio: int) -> float:"
    catalog = tmp_path / "mine"
    init_catalog(catalog, git=False)
    api.apply(shipped, tree, ["dsv4-bf16-sizing"], with_deps=True)
    configurator.write_text(configurator.read_text().replace(marker, marker + "  # on top", 1))
    refused = patchkit(catalog, "new", "on-top", "--from", str(catalog_tree), "--no-commit")
    assert refused.exit_code == 2 and "apply them with --commit in this checkout first" in \
        flat(refused.output), refused.output

    configurator.write_text(configurator.read_text().replace("  # on top", "", 1))
    api.rollback(shipped, tree, ["dsv4-bf16-index-k", "dsv4-bf16-sizing"])
    api.apply(shipped, tree, ["dsv4-bf16-sizing"], with_deps=True, commit=True)
    configurator.write_text(configurator.read_text().replace(marker, marker + "  # on top", 1))
    made = patchkit(catalog, "new", "on-top", "--from", str(catalog_tree), "--no-commit",
                    "--include-applied")
    assert made.exit_code == 0, made.output
    patch = next((catalog / "patches" / "on-top").glob("*.patch")).read_text()
    added = [ln for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert added == ["+    " + marker + "  # on top"], added  # its own line, not the fixes'
    manifest = catalog / "manifests" / "on-top.toml"
    manifest.write_text(manifest.read_text().replace("depends_on = []", 'depends_on = ["dsv4-bf16-sizing"]', 1))
    fresh = checkout(catalog_upstream, "0.5.23", tmp_path / "fresh")
    done = api.apply(Catalog.open(catalog), LocalTarget(roots={"sglang": str(fresh)}),
                     ["on-top"], with_deps=True)
    assert [f.outcome for f in done.fixes] == ["applied", "applied", "applied"], done.fixes
    assert marker + "  # on top" in (fresh / CONFIGURATOR).read_text()
