"""`patchkit demo`: the seed's production fork rebuilt from 0.5.23 and its three fixes deployed.

The demo runs as a user runs it, ``python -m patchkit`` in a subprocess, with
``PATCHKIT_UPSTREAM`` pointing at the session's upstream directory so the release is not
fetched a second time. Its result is then read back with ``patchkit status --json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.catalog import Catalog
from patchkit.demo import (FORK_COMMITS, HOST_POOL, LATER_EDIT, LATER_SUBJECT, SEED_FIXES,
                           build_fork, demo_release, demo_releases)
from patchkit.errors import UsageError
from patchkit.upstream import UpstreamRepo
from tests.fixtures.sglang import CATALOG_RELEASE

REPO = Path(__file__).resolve().parent.parent
STEPS = [
    f"1. build a production fork of SGLang {CATALOG_RELEASE}",
    "2. status before",
    "3. dry run",
    "4. apply all three, all or nothing, then verify",
    "5. status after",
    "6. lineage of the fixes",
]


def run_patchkit(cwd: Path, upstream: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATCHKIT_UPSTREAM=str(upstream))
    return subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(REPO), *args],
                          cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


@pytest.mark.network
def test_demo_deploys_the_seed_fixes_to_a_fork_of_the_real_release(
        catalog_upstream: UpstreamRepo, tmp_path: Path) -> None:
    # The demo's release is the one the shipped catalog is based on: its fork commits are the
    # catalog's current series, which apply to that release only.
    assert demo_release(Catalog(REPO)) == CATALOG_RELEASE
    assert {Catalog(REPO).get(n).upstream.base_release for n in FORK_COMMITS} == {CATALOG_RELEASE}
    versions = catalog_upstream.versions()
    # As the README runs it: from the root of a clone (a git work tree that does not ignore
    # the demo's directory), with the default workdir, inside that work tree.
    clone = tmp_path / "clone"
    clone.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
    (clone / "README.md").write_text("a clone\n")
    subprocess.run(["git", "add", "README.md"], cwd=clone, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "clone"], cwd=clone, check=True)
    workdir = clone / "patchkit-demo"
    proc = run_patchkit(clone, catalog_upstream.path, "demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = flat(proc.stdout)
    positions = [out.find(step) for step in STEPS]
    assert all(p >= 0 for p in positions), (positions, proc.stdout)
    assert positions == sorted(positions), "the steps are printed in order"
    dry_run, applied = out[positions[2]:positions[3]], out[positions[3]:positions[4]]
    for name in SEED_FIXES:
        version = Catalog(REPO).get(name).version
        assert f"would-apply {name} v{version}" in dry_run
        assert f"applied {name} v{version}" in applied
    # the deploy says what it takes effect with: the prefill server's restart (issue 27)
    assert "restart needed prefill" in applied
    # the demo defines no [restarts]: it says to define one (it said patchkit.toml defined it)
    assert "run it yourself; define it in patchkit.toml [restarts]" in applied, applied
    for name in FORK_COMMITS:
        assert f"{name}" in out[positions[0]:positions[1]]
    assert "done: roll back with `patchkit rollback" in out
    # each step's target reads as the command it shows prints it (issue 25, item 14)
    fork, serve = workdir / "sglang-dsv4", workdir / "serve"
    assert f"apply on sglang={fork}, serve={serve}" in out and "(+ serve=" not in out
    # The release came from the session's upstream directory, not from the registry.
    # (the session's wheels live elsewhere; a download would have made <upstream>/wheels).
    assert not (catalog_upstream.path / "wheels").exists()
    assert catalog_upstream.versions() == versions and CATALOG_RELEASE in versions

    log = subprocess.run(["git", "log", "--format=%s", f"v{CATALOG_RELEASE}..HEAD"], cwd=fork,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    catalog = Catalog(REPO)
    assert log == [LATER_SUBJECT] + [catalog.get(name).title for name in reversed(FORK_COMMITS)]
    # the revert of the dead commit kept the later commit to the same file
    assert LATER_EDIT[1] in (fork / HOST_POOL).read_text()
    assert "HICACHE_DBG" not in (fork / HOST_POOL).read_text()

    status = run_patchkit(tmp_path, catalog_upstream.path, "status", "--json",
                          "--target", str(fork), "--root", f"serve={serve}")
    assert status.returncode == 0, status.stderr
    states = {f["name"]: f for f in json.loads(status.stdout)["status"]["fixes"]}
    for name in SEED_FIXES:
        assert states[name]["state"] == "applied"
        assert states[name]["version"] == catalog.get(name).version
        assert all(f["state"] == "ok" for f in states[name]["files"])
    # The prerequisite is a commit of the fork, seen in the files but not applied by patchkit.
    assert states["dsv4-bf16-index-k"]["state"] == "present-unrecorded"
    assert "hierarchical" not in (serve / "serve_dsv4_prefill.sh").read_text()
    # The demo's repositories hold what it made: the clone around them has nothing to commit
    # but the demo's directory itself.
    outer = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True,
                           text=True, check=True).stdout
    assert outer == "?? patchkit-demo/\n"


def test_demo_refuses_a_workdir_it_did_not_make(tmp_path: Path) -> None:
    workdir = tmp_path / "mine"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("keep me\n")
    with pytest.raises(UsageError) as refused:
        build_fork(workdir, Catalog(REPO), upstream=UpstreamRepo(tmp_path / "upstream"))
    assert str(workdir) in str(refused.value) and "--workdir" in str(refused.value)
    assert [p.name for p in workdir.iterdir()] == ["notes.txt"]
    assert not (tmp_path / "upstream").exists()  # refused before any fetch


def test_demo_refuses_an_unsupported_release_up_front_naming_the_supported_ones(
        tmp_path: Path) -> None:
    catalog = Catalog(REPO)
    supported = demo_releases(catalog)
    # read from the manifests: the releases every fix the demo commits or deploys has a
    # variant for (the shipped catalog serves 0.5.22 and 0.5.23)
    assert supported == ("0.5.22", CATALOG_RELEASE)
    assert supported == tuple(sorted(set.intersection(*(
        {r for v in catalog.get(n).all_variants() for r in v.upstream.releases}
        for n in FORK_COMMITS + SEED_FIXES if catalog.get(n).upstream.releases))))
    workdir = tmp_path / "demo"
    with pytest.raises(UsageError) as refused:
        build_fork(workdir, catalog, release="0.5.21", upstream=UpstreamRepo(tmp_path / "upstream"))
    assert "0.5.21" in str(refused.value) and CATALOG_RELEASE in str(refused.value)
    assert refused.value.details["supported"] == ["0.5.22", CATALOG_RELEASE]
    assert not workdir.exists() and not (tmp_path / "upstream").exists()  # nothing fetched

    proc = run_patchkit(tmp_path, tmp_path / "upstream", "demo", "--release", "0.5.21",
                        "--workdir", str(workdir))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--release {CATALOG_RELEASE}" in flat(proc.stderr)
    assert "build a production fork" not in proc.stdout  # refused before the first step
    assert not workdir.exists() and not (tmp_path / "upstream").exists()


@pytest.mark.network
def test_demo_json_is_one_object_with_each_step_as_its_command_prints_it(
        catalog_upstream: UpstreamRepo, tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    proc = run_patchkit(tmp_path, catalog_upstream.path, "demo", "--json", "--workdir", str(workdir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)  # nothing but the object on stdout
    assert data["ok"] is True and data["fixes"] == list(SEED_FIXES)
    fork = data["fork"]
    assert fork["release"] == CATALOG_RELEASE and fork["sglang"] == str(workdir / "sglang-dsv4")
    assert [c["fix"] for c in fork["commits"]] == list(FORK_COMMITS)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=fork["sglang"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert fork["later"] == head
    assert data["dry_run"]["dry_run"] is True
    assert [f["outcome"] for f in data["dry_run"]["fixes"]] == ["would-apply"] * 3
    assert [f["outcome"] for f in data["apply"]["fixes"]] == ["applied"] * 3
    after = {f["name"]: f["state"] for f in data["status_after"]["status"]["fixes"]}
    assert all(after[name] == "applied" for name in SEED_FIXES)
    assert data["status_before"]["status"]["fixes"] and data["lineage"]


def test_demo_finds_the_serve_script_from_a_catalog_made_by_init(tmp_path: Path) -> None:
    """A user catalog (patchkit init) has no docs/examples of its own: the demo takes the
    serve script from the shipped catalog it keeps beside it."""
    from patchkit.authoring import init_catalog
    from patchkit.catalog import shipped_catalog_root
    from patchkit.demo import SERVE_SCRIPT, serve_script_source

    init_catalog(tmp_path / "mine", git=False)
    found = serve_script_source(Catalog.open(tmp_path / "mine"))
    assert found == shipped_catalog_root() / "docs" / "examples" / SERVE_SCRIPT
    with pytest.raises(UsageError, match="patchkit init"):
        serve_script_source(Catalog(tmp_path / "mine"))


def test_the_demo_command_refuses_a_foreign_workdir_before_its_first_step(tmp_path: Path) -> None:
    """`patchkit demo --workdir DIR` printed "1. build a production fork..." and then refused;
    the refusal now comes first, with nothing printed on stdout."""
    import sys

    workdir = tmp_path / "mine"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("keep me\n")
    proc = subprocess.run([sys.executable, "-m", "patchkit", "demo", "--workdir", str(workdir)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and "not made by `patchkit demo`" in proc.stderr
    assert [p.name for p in workdir.iterdir()] == ["notes.txt"]
