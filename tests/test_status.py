"""Status: one request of every full fix the target's roots allow, answered from the state for
recorded fixes and from the files for the others, locally and over SSH alike."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import pytest

from patchkit import api, errors
from patchkit.catalog import Catalog, series
from patchkit.targets.remote import RemoteTarget
from patchkit.targets import LocalTarget
from tests.test_remote import PY, SAMPLES, Ssh, make_tree, ssh  # noqa: F401  (ssh is a fixture)

POOL = "python/sglang/srt/pool.py"


def states(result: Any) -> dict[str, str]:
    return {s.name: s.state for s in result.status}


class Recording:
    """A local target that keeps every request it runs."""

    def __init__(self, inner: LocalTarget) -> None:
        self.inner, self.requests = inner, []
        self.roots, self.python, self.description = inner.roots, inner.python, "recording"
        self.is_remote = False

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        return self.inner.run(dict(request))


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, str]:
    return make_tree(tmp_path / "tree")


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    shutil.copytree(SAMPLES / "catalog", tmp_path / "catalog")
    return Catalog(tmp_path / "catalog")


def test_status_sends_every_full_fix_in_one_request(roots: dict[str, str],
                                                     catalog: Catalog) -> None:
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    spy = Recording(target)
    result = api.status(catalog, spy)  # type: ignore[arg-type]
    [request] = spy.requests
    assert [f["name"] for f in request["fixes"]] == ["index-k-bytes", "old-index-k", "pool-guard"]
    assert all(f["files"] and "stub" not in f for f in request["fixes"])
    assert request["dependencies"] == []
    assert states(result) == {"index-k-bytes": "applied", "old-index-k": "not-applied",
                              "pool-guard": "applied"}


def test_a_fix_using_a_root_the_target_lacks_is_left_out(tmp_path: Path, catalog: Catalog) -> None:
    bare = make_tree(tmp_path / "bare")
    target = Recording(LocalTarget({"sglang": bare["sglang"]}, PY, "local"))
    result = api.status(catalog, target)  # type: ignore[arg-type]
    assert "pool-guard" not in states(result)  # it patches serve.sh too
    assert [f["name"] for f in target.requests[0]["fixes"]] == ["index-k-bytes", "old-index-k"]


def test_an_applied_fix_on_a_root_not_given_is_left_out_not_the_end(
        roots: dict[str, str], catalog: Catalog) -> None:
    """After `demo`, `status` in the fork (only the sglang root found) refused the whole status
    because the recorded prefill fix patches the serve root; it is left out, named, as a fix
    of the catalog on that root is, and so is one the catalog no longer holds."""
    only = LocalTarget({"sglang": roots["sglang"]}, PY, "local")
    before = api.status(catalog, only)  # left out, and not applied there: nothing unseen
    assert before.left_out == (("pool-guard", ("serve",)),) and before.unseen == ()
    api.apply(catalog, LocalTarget(roots, PY, "local"), ["pool-guard"], with_deps=True)
    result = api.status(catalog, only)
    assert states(result) == {"index-k-bytes": "applied", "old-index-k": "not-applied"}
    assert result.left_out == (("pool-guard", ("serve",)),)
    assert result.unseen == (("pool-guard", ("serve",)),)  # applied there, not looked at
    verified = api.verify(catalog, only)
    assert verified.ok  # every applied fix it can see, verified ...
    assert [f.name for f in verified.fixes] == ["index-k-bytes"]
    assert verified.unseen == (("pool-guard", ("serve",)),)  # ... and the one it could not, named
    (Path(catalog.root) / "manifests" / "pool-guard.toml").unlink()
    gone = api.status(Catalog(catalog.root), only)
    assert gone.left_out == (("pool-guard", ("serve",)),) and "pool-guard" not in states(gone)


def test_an_unrecorded_fix_present_in_the_files_is_still_found(
        roots: dict[str, str], catalog: Catalog) -> None:
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["index-k-bytes"])
    shutil.rmtree(Path(roots["sglang"], ".patchkit"))  # the change stays, the record goes
    result = api.status(catalog, target)
    assert states(result)["index-k-bytes"] == "present-unrecorded"
    [fix] = [s for s in result.status if s.name == "index-k-bytes"]
    assert fix.applied_at is None and {f["state"] for f in fix.files} == {"ok"}


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


def test_a_recorded_fix_no_longer_in_the_catalog_is_still_listed_last(
        roots: dict[str, str], catalog: Catalog) -> None:
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    (Path(catalog.root) / "manifests" / "pool-guard.toml").unlink()
    fresh = Catalog(catalog.root)
    result = api.status(fresh, target)
    assert [s.name for s in result.status] == ["index-k-bytes", "old-index-k", "pool-guard"]
    assert states(result)["pool-guard"] == "applied"


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
    # the same answer, but for the processes seen: the ssh session's own sshd is one more
    def fixes_of(result: Any) -> dict[str, Any]:
        return {k: v for k, v in result.raw["status"].items() if k != "running"}

    assert fixes_of(remote) == fixes_of(api.status(catalog, local))
    assert remote.raw["status"]["running"]["available"]
    assert states(remote) == {"index-k-bytes": "applied", "old-index-k": "not-applied",
                              "pool-guard": "not-applied"}


def test_a_broken_manifest_is_a_broken_entry_and_status_goes_on(roots: dict[str, str],
                                                                  catalog: Catalog) -> None:
    target = LocalTarget(roots, PY, "local")
    names = {s.name for s in api.status(catalog, target).status}
    path = Path(catalog.root) / "manifests" / "pool-guard.toml"
    path.write_text(path.read_text().replace('status = "active"', 'status = "alive"'))
    for _ in range(2):  # issue 25, item 10: the others are still shown
        result = api.status(Catalog(catalog.root), target)
        assert [(b.name, b.file) for b in result.broken] == [("pool-guard", str(path))]
        assert result.broken[0].line == next(i for i, text in enumerate(
            path.read_text().splitlines(), 1) if text.startswith("status ="))
        assert {s.name for s in result.status} == names - {"pool-guard"}


def test_a_patch_gone_after_the_catalog_loaded_is_a_broken_entry(roots: dict[str, str],
                                                                 catalog: Catalog) -> None:
    """As a manifest that cannot be read: the fix the target does not record is an error row
    naming the patch, and the other fixes go on (tests/test_broken_series.py)."""
    catalog.all()
    patch = Path(catalog.root) / "patches" / "pool-guard" / "0002-serve-pin-index-k-dtype.patch"
    patch.unlink()
    result = api.status(catalog, LocalTarget(roots, PY, "local"))
    assert [b.name for b in result.broken] == ["pool-guard"]
    assert "0002-serve-pin-index-k-dtype.patch" in result.broken[0].message
    assert "pool-guard" not in states(result) and states(result)["index-k-bytes"] == "not-applied"


def test_status_reads_only_the_series_of_fixes_the_target_does_not_record(
        roots: dict[str, str], catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorded fix's state is its recorded hashes and the catalog's version: its patches are
    neither read nor parsed (issue 29); an unrecorded one's are, to look for its change."""
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    parsed: list[str] = []
    real = series._parse  # every series read goes through it
    monkeypatch.setattr(series, "_parse",
                        lambda path, *a, **k: parsed.append(Path(path).parent.name) or real(path, *a, **k))
    result = api.status(catalog, target)
    assert states(result) == {"index-k-bytes": "applied", "old-index-k": "not-applied",
                              "pool-guard": "applied"}
    assert parsed == ["old-index-k"]
    # a recorded fix whose patch no longer parses is still answered from its record
    Path(catalog.root, "patches", "pool-guard", "0001-refuse-zero-per-token.patch").write_text("junk\n")
    assert states(api.status(catalog, target))["pool-guard"] == "applied"


def test_status_and_verify_say_which_applied_fix_they_did_not_look_at(
        roots: dict[str, str], catalog: Catalog) -> None:
    """A user who gives only the sglang root is told, without --all, that an applied fix was
    not looked at (not verified) and which --root would show it; --json names it too."""
    import json
    import subprocess
    import sys

    api.apply(catalog, LocalTarget(roots, PY, "local"), ["pool-guard"], with_deps=True)
    base = [sys.executable, "-m", "patchkit", "--catalog", str(catalog.root)]
    target = ["--target", roots["sglang"]]
    note = "pool-guard: applied here, not looked at: root serve not given (--root serve=PATH)"
    for op in ("status", "verify"):
        plain = subprocess.run([*base, op, *target], capture_output=True, text=True)
        assert plain.returncode == 0, plain.stderr
        assert note.replace("not looked at", "not verified" if op == "verify" else "not looked at") \
            in plain.stderr, (op, plain.stderr)
        as_json = subprocess.run([*base, op, *target, "--json"], capture_output=True, text=True)
        assert as_json.returncode == 0, as_json.stderr
        assert json.loads(as_json.stdout)["unseen"] == [{"name": "pool-guard",
                                                         "missing_roots": ["serve"]}]
    full = subprocess.run([*base, "verify", *target, "--root", f"serve={roots['serve']}"],
                          capture_output=True, text=True)
    assert full.returncode == 0 and "not verified" not in full.stderr, full.stderr


def test_status_json_says_a_fix_left_out_once(roots: dict[str, str], catalog: Catalog) -> None:
    """`status --json` printed the fixes on a root not given twice: the documented top-level
    `left_out` and the engine's own `status.left_out` (which the client reads to name them).
    One document says it once, in `left_out` (with `unseen` for those applied there)."""
    import subprocess
    import sys

    api.apply(catalog, LocalTarget(roots, PY, "local"), ["pool-guard"], with_deps=True)
    shown = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog.root),
                            "status", "--json", "--target", roots["sglang"]],
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["left_out"] == [{"name": "pool-guard", "missing_roots": ["serve"]}]
    assert doc["unseen"] == doc["left_out"]  # applied there, as `unseen` documents
    assert "left_out" not in doc["status"], doc["status"]
    assert [f["name"] for f in doc["status"]["fixes"]] == ["index-k-bytes", "old-index-k"]
    # the library's result still carries what the engine said, which the client reads
    assert api.status(catalog, LocalTarget({"sglang": roots["sglang"]}, PY, "local")
                      ).raw["status"]["left_out"] == [{"name": "pool-guard", "roots": ["serve"]}]


def test_an_applied_fix_whose_manifest_breaks_is_one_error_row(roots: dict[str, str],
                                                               catalog: Catalog) -> None:
    """The target records the fix; its manifest no longer parses: status shows one row for it,
    state ``error`` naming the file and line, with the version and time it was applied (not
    an ``applied`` row from the record and an ``error`` row from the catalog)."""
    import subprocess
    import sys

    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    manifest = Path(catalog.root) / "manifests" / "pool-guard.toml"
    text = manifest.read_text()
    lineno = text.splitlines().index("version = 1") + 1
    manifest.write_text(text.replace("version = 1\n", 'version = "two"\n', 1))
    shown = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog.root),
                            "status", "--target", roots["sglang"], "--root",
                            f"serve={roots['serve']}"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    rows = [r.split("\t") for r in shown.stdout.splitlines()]
    guard = [r for r in rows if r[0] == "pool-guard"]
    assert len(guard) == 1, shown.stdout
    assert guard[0][1:3] == ["error", "v1"] and guard[0][3]  # applied at: kept
    assert f"pool-guard.toml:{lineno}: 'version'" in guard[0][4]


def test_a_recorded_fix_no_longer_in_the_catalog_rolls_back_from_its_record(
        roots: dict[str, str], catalog: Catalog) -> None:
    """Its manifest was deleted while the target still carries it: status lists it, and
    rollback restores its files from the backups the target keeps (a dry run first, writing
    nothing); a name the target does not record is still an unknown fix."""
    import subprocess
    import sys

    pristine = {p: Path(roots[r], p).read_bytes() for r, p in (("sglang", POOL), ("serve", "serve.sh"))}
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    patched = {p: Path(roots[r], p).read_bytes() for r, p in (("sglang", POOL), ("serve", "serve.sh"))}
    assert patched != pristine
    (Path(catalog.root) / "manifests" / "pool-guard.toml").unlink()
    shown = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog.root),
                            "status", "--target", roots["sglang"], "--root",
                            f"serve={roots['serve']}"], capture_output=True, text=True)
    row = next(r for r in shown.stdout.splitlines() if r.startswith("pool-guard"))
    assert row.split("\t")[1].startswith("applied: not in the catalog"), row  # not plain "applied"
    # which catalog was read, and that another may hold it (status run where another is found)
    assert f"not in the catalog {catalog.root}: its manifest is gone, or the fix was applied " \
        "from another catalog (give that one with --catalog)" in row, row
    base = [sys.executable, "-m", "patchkit", "--catalog", str(catalog.root), "rollback",
            "--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    dry = subprocess.run([*base, "pool-guard", "--dry-run"], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert "would-roll-back pool-guard v1" in dry.stdout, dry.stdout
    assert {p: Path(roots[r], p).read_bytes() for r, p in (("sglang", POOL), ("serve", "serve.sh"))} == patched
    done = subprocess.run(base + ["pool-guard"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    after = {p: Path(roots[r], p).read_bytes() for r, p in (("sglang", POOL), ("serve", "serve.sh"))}
    # index-k-bytes (still in the catalog, still applied) changed the pool file first
    assert after["serve.sh"] == pristine["serve.sh"]
    states_now = states(api.status(Catalog(catalog.root), target))
    assert "pool-guard" not in states_now and states_now["index-k-bytes"] == "applied"
    unknown = subprocess.run(base + ["pool-gaurd"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "no fix named 'pool-gaurd'" in unknown.stderr, unknown.stderr


def test_a_rollback_lists_for_each_fix_the_directories_it_writes_in(
        roots: dict[str, str], catalog: Catalog) -> None:
    """Rolled back together, each fix's writability checks are of its own files' directories
    and the state's, not of every directory the run writes in (index-k-bytes touches only the
    sglang root: it listed the serve root's directory, which pool-guard writes)."""
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    dry = api.rollback(catalog, target, ["pool-guard", "index-k-bytes"], dry_run=True)
    wheres = {f.name: sorted(c.where for c in f.preconditions if c.kind == "writable")
              for f in dry.fixes}
    assert wheres == {"index-k-bytes": ["sglang:" + POOL, "state"],
                      "pool-guard": ["serve:serve.sh", "sglang:" + POOL, "state"]}, wheres


def test_a_fix_already_in_the_files_unrecorded_is_left_out_of_an_apply_not_a_conflict(
        roots: dict[str, str], catalog: Catalog) -> None:
    """The fork carries index-k-bytes as its own change (applied here, then its record
    deleted): status said present-unrecorded, but apply exited 3 on a conflict, --force too,
    and verify said "apply it". Apply now leaves it out with sync's outcome, applies the rest
    (pool-guard, which requires it), and verify says why it does not check it."""
    import subprocess
    import sys

    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["index-k-bytes"])
    shutil.rmtree(Path(roots["sglang"], ".patchkit"))
    subprocess.run(["git", "-C", roots["sglang"], "-c", "user.name=Fork", "-c",
                    "user.email=fork@example.com", "commit", "-qam", "carry index-k-bytes"],
                   check=True)
    carried = Path(roots["sglang"], POOL).read_bytes()
    assert states(api.status(catalog, target))["index-k-bytes"] == "present-unrecorded"
    base = [sys.executable, "-m", "patchkit", "--catalog", str(catalog.root)]
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    for force in ([], ["--force"]):
        alone = subprocess.run([*base, "apply", "index-k-bytes", *where, "--json", *force],
                               capture_output=True, text=True)
        assert alone.returncode == 0, alone.stdout + alone.stderr
        [fix] = json.loads(alone.stdout)["fixes"]
        assert fix["outcome"] == "present-unrecorded" and "in the files already" in fix["detail"]
        assert fix["preconditions"] == []  # as sync says it: its refused checks are not listed
        assert Path(roots["sglang"], POOL).read_bytes() == carried
    verify = subprocess.run([*base, "verify", "index-k-bytes", *where], capture_output=True,
                            text=True)
    assert verify.returncode == 1
    assert "present-unrecorded" in verify.stderr and "apply it" not in verify.stderr, verify.stderr
    both = api.apply(catalog, target, ["pool-guard"], with_deps=True)
    assert {f.name: f.outcome for f in both.fixes} == {"index-k-bytes": "present-unrecorded",
                                                       "pool-guard": "applied"}
    assert states(api.status(catalog, target)) == {
        "index-k-bytes": "present-unrecorded", "old-index-k": "not-applied", "pool-guard": "applied"}


def test_a_root_given_at_the_wrong_directory_is_said_and_rollback_refuses_to_write_there(
        roots: dict[str, str], catalog: Catalog, tmp_path: Path) -> None:
    """--root serve= mistyped as an empty directory: status called pool-guard's serve.sh
    "missing" drift, and `rollback --force`, the remedy drift suggests, wrote the backup into
    the wrong directory and dropped the record while the real serve.sh kept the change. Now
    status says which root to give, and rollback refuses (exit 5, --force too), writing
    nothing; with the right root it rolls back."""
    import subprocess
    import sys

    api.apply(catalog, LocalTarget(roots, PY, "local"), ["pool-guard"], with_deps=True)
    typo = tmp_path / "typo"
    typo.mkdir()
    state = Path(roots["sglang"], ".patchkit", "state.json").read_bytes()
    base = [sys.executable, "-m", "patchkit", "--catalog", str(catalog.root)]
    wrong = ["--target", roots["sglang"], "--root", f"serve={typo}"]
    shown = subprocess.run([*base, "status", *wrong], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    row = next(r for r in shown.stdout.splitlines() if r.startswith("pool-guard"))
    assert f"give --root serve={roots['serve']}" in row, row
    for force in ([], ["--force"]):
        refused = subprocess.run([*base, "rollback", "pool-guard", *wrong, *force],
                                 capture_output=True, text=True)
        assert refused.returncode == errors.EXIT_TARGET, refused.stdout + refused.stderr
        assert "refusing to roll back pool-guard" in refused.stderr
        assert list(typo.iterdir()) == []
        assert Path(roots["sglang"], ".patchkit", "state.json").read_bytes() == state
    right = subprocess.run([*base, "rollback", "pool-guard", "--target", roots["sglang"],
                            "--root", f"serve={roots['serve']}"], capture_output=True, text=True)
    assert right.returncode == 0, right.stderr
