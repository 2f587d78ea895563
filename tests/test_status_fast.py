"""Status in two steps: stubs answered from the state, full fixes only for what is not recorded.

Each test would fail if the stub path broke: a fix lost, answered twice, answered from the
wrong request, a series read for a recorded fix, or a changed manifest served from the index.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from patchkit import api, engine, errors, plan
from patchkit.catalog import series
from patchkit.catalog import Catalog, FixStub
from patchkit.targets.remote import RemoteTarget
from patchkit.targets import LocalTarget
from tests.test_remote import PY, SAMPLES, Ssh, make_tree, ssh  # noqa: F401  (ssh is a fixture)

POOL = "python/sglang/srt/pool.py"


def one_request(catalog: Catalog, roots: dict[str, str]) -> dict[str, Any]:
    """The status as one request of every full fix gives it (what status sent before stubs)."""
    fixes = [f for f in catalog.all() if set(f.roots) <= set(roots)]
    request = plan.build_request(catalog, fixes, op="status", roots=roots, state_root="sglang",
                                 python=PY)
    result = engine.run(request)
    assert result["ok"], result["error"]
    return result["status"]


def states(result: Any) -> dict[str, str]:
    return {s.name: s.state for s in result.status}


class Between:
    """A local target that runs ``action`` after its first request: the target changes
    between the stubs' request and the full fixes' request."""

    def __init__(self, inner: LocalTarget, action: Callable[[], None]) -> None:
        self.inner, self.action, self.requests = inner, action, []
        self.roots, self.python, self.description = inner.roots, inner.python, "between"
        self.is_remote = False

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        result = self.inner.run(dict(request))
        if len(self.requests) == 1:
            self.action()
        return result


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, str]:
    return make_tree(tmp_path / "tree")


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    shutil.copytree(SAMPLES / "catalog", tmp_path / "catalog")
    return Catalog(tmp_path / "catalog")


@pytest.fixture
def series_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The patch files whose series were read (the stub path must read none)."""
    seen: list[str] = []
    real = series.read_series

    def spy(patches: Any) -> Any:
        seen.extend(Path(p).name for p, _root in patches)
        return real(patches)

    monkeypatch.setattr(series, "read_series", spy)
    return seen


def strip(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k != "needs_detection"}


def test_an_unrecorded_fix_present_in_the_files_is_still_found(
        roots: dict[str, str], catalog: Catalog) -> None:
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["index-k-bytes"])
    shutil.rmtree(Path(roots["sglang"], ".patchkit"))  # the change stays, the record goes
    result = api.status(catalog, target)
    assert states(result)["index-k-bytes"] == "present-unrecorded"
    [fix] = [s for s in result.status if s.name == "index-k-bytes"]
    assert fix.applied_at is None and {f["state"] for f in fix.files} == {"ok"}
    assert result.raw["status"] == strip(one_request(catalog, roots))


def test_a_drifted_a_missing_and_a_restored_recorded_file(roots: dict[str, str],
                                                          catalog: Catalog) -> None:
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    serve, pool = Path(roots["serve"], "serve.sh"), Path(roots["sglang"], POOL)
    ours = pool.read_bytes()
    pool.write_bytes(ours)  # same bytes, new stamp: read and hashed, still ok
    assert states(api.status(catalog, target))["pool-guard"] == "applied"
    st, text = serve.stat(), serve.read_text()
    serve.write_text(text.replace("bf16", "fp32", 1))  # same size, same inode ...
    os.utime(serve, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... same mtime: only ctime moved
    assert states(api.status(catalog, target))["pool-guard"] == "drifted"
    serve.write_text(text + "# edited by hand\n")
    result = api.status(catalog, target)
    [guard] = [s for s in result.status if s.name == "pool-guard"]
    assert guard.state == "drifted"
    assert {f["path"]: f["state"] for f in guard.files}["serve.sh"] == "drifted"
    pool.unlink()
    result = api.status(catalog, target)
    [guard] = [s for s in result.status if s.name == "pool-guard"]
    assert {f["path"]: f["state"] for f in guard.files}[POOL] == "missing"
    assert result.raw["status"] == strip(one_request(catalog, roots))


def test_a_fix_rolled_back_between_the_two_requests_is_listed_once(
        roots: dict[str, str], catalog: Catalog) -> None:
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    spy = Between(target, lambda: api.rollback(catalog, target, ["pool-guard", "index-k-bytes"]))
    result = api.status(catalog, spy)  # type: ignore[arg-type]
    # each fix once, in catalog order: the recorded ones as the first request saw them
    assert [s.name for s in result.status] == ["index-k-bytes", "old-index-k", "pool-guard"]
    assert states(result)["pool-guard"] == "applied"
    assert states(result)["old-index-k"] == "not-applied"
    assert states(api.status(catalog, target)) == {
        "index-k-bytes": "not-applied", "old-index-k": "not-applied", "pool-guard": "not-applied"}


def test_a_recorded_fix_no_longer_in_the_catalog_is_still_listed_last(
        roots: dict[str, str], catalog: Catalog) -> None:
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    (Path(catalog.root) / "manifests" / "pool-guard.toml").unlink()
    fresh = Catalog(catalog.root)
    result = api.status(fresh, target)
    assert [s.name for s in result.status] == ["index-k-bytes", "old-index-k", "pool-guard"]
    assert result.raw["status"] == strip(one_request(fresh, roots))


def test_a_deleted_file_comes_back_as_drift(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "python/sglang").mkdir(parents=True)
    (tree / "python/sglang/__init__.py").write_text("")
    (tree / "python/sglang/old.py").write_text("x = 1\n")
    cat = tmp_path / "catalog"
    (cat / "manifests").mkdir(parents=True)
    (cat / "patches/drop-old").mkdir(parents=True)
    (cat / "patches/drop-old/0001-drop.patch").write_text(
        series.diff_files(b"x = 1\n", None, "python/sglang/old.py"))
    (cat / "manifests/drop-old.toml").write_text(
        'format = 1\nname = "drop-old"\nversion = 1\ntitle = "Drop old"\nstatus = "active"\n'
        'rationale = "Unused."\n[upstream]\nbase_release = "0.5.21"\nreleases = []\n'
        '[[patches]]\nfile = "0001-drop.patch"\n')
    catalog, target = Catalog(cat), LocalTarget({"sglang": str(tree)}, PY, "local")
    api.apply(catalog, target, ["drop-old"])
    assert states(api.status(catalog, target)) == {"drop-old": "applied"}
    (tree / "python/sglang/old.py").write_text("x = 1\n")
    result = api.status(catalog, target)
    assert states(result) == {"drop-old": "drifted"}
    assert result.status[0].files[0]["state"] == "drifted"


@pytest.mark.ssh
def test_a_remote_status_sends_full_fixes_in_one_session(roots: dict[str, str], catalog: Catalog,
                                                         ssh: Ssh) -> None:  # noqa: F811
    local = LocalTarget(roots, PY, "local")
    api.apply(catalog, local, ["index-k-bytes"])
    before = ssh.count()
    remote = api.status(catalog, RemoteTarget(ssh.spec(), roots, PY))
    assert ssh.count() == before + 1  # one SSH session, however many fixes are unrecorded
    assert "needs_detection" not in remote.raw["status"]
    assert remote.raw["status"] == api.status(catalog, local).raw["status"]
    assert states(remote) == {"index-k-bytes": "applied", "old-index-k": "not-applied",
                              "pool-guard": "not-applied"}


# -- the manifest index ------------------------------------------------------------------------


def settled(catalog: Catalog) -> None:
    """Wait until the file system's clock is past every manifest's ctime: the index records
    no manifest changed within the current clock tick (the racy rule)."""
    newest = max(p.stat().st_ctime_ns for p in catalog.manifests_dir.iterdir())
    probe = Path(catalog.root) / ".clock"
    while True:
        probe.write_bytes(b"")
        if probe.stat().st_mtime_ns > newest:
            break
        time.sleep(0.005)
    probe.unlink()


def test_unchanged_manifests_are_not_read_again(catalog: Catalog,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    settled(catalog)
    first = catalog.stubs()
    assert [(s.name, s.version) for s in first] == [
        ("index-k-bytes", 2), ("old-index-k", 1), ("pool-guard", 1)]
    assert {s.name: set(s.roots) for s in first}["pool-guard"] == {"sglang", "serve"}
    from patchkit.catalog import manifest

    monkeypatch.setattr(manifest, "load_manifest", lambda *a, **k: pytest.fail("read again"))
    assert Catalog(catalog.root).stubs() == first


def test_an_edited_manifest_is_validated_again_even_with_its_old_size_and_mtime(
        catalog: Catalog) -> None:
    settled(catalog)
    before = {s.name: s.version for s in catalog.stubs()}
    path = Path(catalog.root) / "manifests" / "old-index-k.toml"
    st = path.stat()
    path.write_text(path.read_text().replace("version = 1\n", "version = 7\n", 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime: only ctime moves
    assert {s.name: s.version for s in Catalog(catalog.root).stubs()} == dict(before,
                                                                              **{"old-index-k": 7})


def test_a_broken_manifest_fails_every_time(catalog: Catalog) -> None:
    catalog.stubs()
    path = Path(catalog.root) / "manifests" / "pool-guard.toml"
    path.write_text(path.read_text().replace('status = "active"', 'status = "alive"'))
    for _ in range(2):
        with pytest.raises(errors.ManifestError, match="pool-guard.toml"):
            Catalog(catalog.root).stubs()


def test_an_indexed_fix_equals_the_loaded_one_and_its_series_is_still_checked(
        catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchkit.catalog import manifest

    settled(catalog)
    loaded = {f.name: f for f in catalog.all()}
    real = manifest.load_manifest
    monkeypatch.setattr(manifest, "load_manifest", lambda *a, **k: pytest.fail("read again"))
    again = Catalog(catalog.root)
    assert {f.name: f for f in again.all()} == loaded  # every field, paths included
    patch = Path(catalog.root) / "patches" / "pool-guard" / "0002-serve-pin-index-k-dtype.patch"
    patch.unlink()
    with pytest.raises(errors.ManifestError, match="0002-serve-pin-index-k-dtype.patch"):
        Catalog(catalog.root).get("pool-guard")
    monkeypatch.setattr(manifest, "load_manifest", real)
