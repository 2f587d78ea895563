"""A hostile environment around the engine (issue 12): a checkout moved between a crash and its
recovery, a full disk in the middle of the writes, a directory swapped for a symlink while
files are written, ``.patchkit`` pointing elsewhere, one file reached by two spellings, a
process editing a file in place during an apply, patches aimed at ``.patchkit/`` or ``.git/``,
file names the file system refuses, a killed writability probe, SIGTERM mid-write.

Each case checks the promise: the target is left as it was or fully changed, nothing outside
the roots is touched, and the error says what failed and what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from patchkit import api, errors
from patchkit.catalog import Catalog
from patchkit.engine import faults
from patchkit.catalog.series import diff_files
from patchkit.targets import LocalTarget
from patchkit.request_builder import build_request
from tests.engine.helpers import make_checkout
from tests.engine.test_preconditions import _make_read_only
from tests.test_faults import catalog, request
from tests.test_hostile import Case, digest, fill, small_disk  # noqa: F401 (a fixture)
from tests.test_remote import make_tree, snapshot

PY = sys.executable
MOD = "python/sglang/srt/mod.py"
DRIVER = ("import sys, json; from patchkit.engine import run; "
          "print(json.dumps(run(json.loads(sys.stdin.read()))))")


def kill_at(req: Dict[str, Any], point: str) -> None:
    env = dict(os.environ, PATCHKIT_FAULT=point)
    proc = subprocess.run([PY, "-c", DRIVER], input=json.dumps(req), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, proc.stdout, proc.stderr)


def moved(roots: Dict[str, str], old: Path, new: Path) -> Dict[str, str]:
    return {k: v.replace(str(old), str(new), 1) for k, v in roots.items()}


# -- 1, 2: the checkout moved between the crash and the recovery --------------------------------


def test_recovery_after_the_checkout_moved_acts_on_the_given_target(tmp_path: Path) -> None:
    """Killed after the first rename; the tree is moved and a decoy now lives at the old path:
    the next status restores the moved tree and never writes into the decoy."""
    old = tmp_path / "old"
    roots = make_tree(old)
    before = snapshot(roots)
    kill_at(request("apply", roots), "rename:2")  # the first file is replaced, the second not
    new = tmp_path / "new"
    os.rename(old, new)
    decoy = make_tree(old)  # something else now lives at the old path
    (Path(decoy["sglang"]) / "decoy.txt").write_text("not yours\n")
    decoy_before = snapshot(decoy, state=True)
    new_roots = moved(roots, old, new)
    result = api.status(catalog(), LocalTarget(new_roots, PY, "local"))
    assert [r["outcome"] for r in result.raw["recovered"]] == ["rolled-back"]
    assert snapshot(new_roots) == before  # keys are root-relative
    assert snapshot(decoy, state=True) == decoy_before  # nothing written at the old path
    assert not (Path(new_roots["sglang"]) / ".patchkit/journal.json").exists()


def test_journal_that_does_not_match_the_target_is_refused(tmp_path: Path) -> None:
    """The moved tree's files are not what the journal could have left (changed after the
    crash, or the journal came with a copy): recovery refuses and changes nothing."""
    old = tmp_path / "old"
    roots = make_tree(old)
    kill_at(request("apply", roots), "rename:2")
    new = tmp_path / "new"
    os.rename(old, new)
    new_roots = moved(roots, old, new)
    serve = Path(new_roots["serve"]) / "serve.sh"
    serve.write_text(serve.read_text() + "# edited by hand after the crash\n")
    before = snapshot(new_roots, state=True)
    with pytest.raises(errors.TargetError) as info:
        api.status(catalog(), LocalTarget(new_roots, PY, "local"))
    message = str(info.value)
    assert "journal" in message and "serve.sh" in message
    assert "nothing was changed" in message
    assert snapshot(new_roots, state=True) == before


def test_journal_stores_root_relative_paths_only(tmp_path: Path) -> None:
    roots = make_tree(tmp_path / "t")
    kill_at(request("apply", roots), "rename:1")
    text = (Path(roots["sglang"]) / ".patchkit/journal.json").read_text()
    assert str(tmp_path) not in text, text


def new_dir_case(base: Path) -> Case:
    case = Case(base)
    case.patch(diff_files(None, b"x = 1\n", "python/sglang/fresh/deep/x.py").encode())
    return case


def test_rollback_after_a_move_removes_only_the_moved_trees_directories(tmp_path: Path) -> None:
    case = new_dir_case(tmp_path / "a")
    case.apply()
    state = json.loads((case.root / ".patchkit/state.json").read_text())
    assert str(case.root) not in json.dumps(state["fixes"][0]["created_dirs"])
    new_root = tmp_path / "b"
    os.rename(case.root, new_root)
    (case.root / "python/sglang/fresh/deep").mkdir(parents=True)  # empty dirs at the old path
    api.rollback(Catalog(case.catalog_dir), LocalTarget({"sglang": str(new_root)}, PY, "local"), ["h"])
    assert (case.root / "python/sglang/fresh/deep").is_dir()  # the old path keeps its directories
    assert not (new_root / "python/sglang/fresh").exists()  # the moved tree loses the ones it got


# -- 3: a full disk in the middle of the writes -------------------------------------------------


def two_big_files(root: Path) -> tuple:
    old_a = b"".join(b"a %06d\n" % i for i in range(4000))  # ~40 KB each
    old_b = b"".join(b"b %06d\n" % i for i in range(4000))
    (root / "scripts/a.txt").write_bytes(old_a)
    (root / "scripts/b.txt").write_bytes(old_b)
    new_a = old_a.replace(b"a 000010\n", b"a ten\n")
    new_b = old_b.replace(b"b 000010\n", b"b ten\n")
    return diff_files(old_a, new_a, "scripts/a.txt") + diff_files(old_b, new_b, "scripts/b.txt")


def test_full_disk_between_two_file_writes_restores_without_space(small_disk: Path,
                                                                   tmp_path: Path) -> None:
    """Room for the first file's temporary copy, not the second's: the first is replaced,
    the second fails; restoring the first needs no space (its backup is renamed back)."""
    root = make_checkout(small_disk, git_repo=False)
    case = Case(tmp_path, root)
    case.patch(two_big_files(root).encode())
    before = digest(root)
    filler = fill(small_disk, keep=60 * 1024)  # one ~40 KB temp file fits, two do not
    with pytest.raises(errors.PermissionDenied) as info:
        case.apply()
    assert "free space" in str(info.value)
    assert digest(root) == before  # byte-identical: no temp file, no .patchkit, first file back
    filler.unlink()


def test_recovery_on_a_full_disk(small_disk: Path, tmp_path: Path) -> None:
    """Killed after the first rename; then the disk fills up: status recovers all the same."""
    root = make_checkout(small_disk, git_repo=False)
    case = Case(tmp_path, root)
    case.patch(two_big_files(root).encode())
    before = {k: v for k, v in digest(root).items() if not k.startswith(".patchkit")}
    fixes = Catalog(case.catalog_dir).apply_order(["h"])
    req = build_request(Catalog(case.catalog_dir), fixes, op="apply",
                        roots={"sglang": str(root)}, state_root="sglang", python=PY)
    kill_at(req, "rename:2")
    filler = fill(small_disk)
    result = api.status(Catalog(case.catalog_dir), case.target)
    assert [r["outcome"] for r in result.raw["recovered"]] == ["rolled-back"]
    assert {k: v for k, v in digest(root).items() if not k.startswith(".patchkit")} == before
    assert not (root / ".patchkit/journal.json").exists()
    filler.unlink()


# -- 4: a directory swapped for a symlink while the files are written ---------------------------


def many_files_patch(root: Path, n: int = 6) -> str:
    out = ""
    for i in range(n):
        rel = "python/sglang/srt/m%d.py" % i
        (root / rel).write_bytes(b"v = %d\n" % i)
        out += diff_files(b"v = %d\n" % i, b"v = %d0\n" % i, rel)
    return out


# at the renames: the temporary files are made by several threads at once, and a swap in
# one of them would race the walks of the others (a mkdir where the directory was renamed away)
@pytest.mark.parametrize("when", ["journal:1", "rename:3"])
def test_directory_swapped_for_a_symlink_during_the_writes(case: Case, monkeypatch: pytest.MonkeyPatch,
                                                            when: str) -> None:
    case.patch(many_files_patch(case.root).encode())
    srt = case.root / "python/sglang/srt"
    point, n = when.split(":")
    seen = {"n": 0}
    real_fault = faults.fault

    def swap(name: str) -> None:
        real_fault(name)
        if name == point:
            seen["n"] += 1
            if seen["n"] == int(n):
                os.rename(srt, case.root / "srt.moved")
                srt.symlink_to(case.outside, target_is_directory=True)

    for p in srt.iterdir():  # the directory the link will point at holds the same names
        if p.is_file():
            shutil.copy(p, case.outside / p.name)

    monkeypatch.setattr("patchkit.engine.txn.fault", swap)
    outside_before = digest(case.outside)
    with pytest.raises(errors.UnsafePathError) as info:
        case.apply()
    assert "symlink" in str(info.value)
    assert digest(case.outside) == outside_before  # not one byte written outside the root
    # the user puts the directory back: the next run restores whatever the failed run left
    srt.unlink()
    os.rename(case.root / "srt.moved", srt)
    api.status(Catalog(case.catalog_dir), case.target)
    for i in range(6):
        assert (srt / ("m%d.py" % i)).read_bytes() == b"v = %d\n" % i
    assert not (case.root / ".patchkit/journal.json").exists()


def test_a_directory_moved_out_of_the_root_and_linked_back_is_refused_mid_write(
        case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory itself leaves the root while its files are written, a symlink to it put
    in its place: the same directory, so its descriptor still opens it, but writing through
    it would write outside the root. The held directory is checked against its path before
    each file (not only when it is first opened): refused, and no file written out there."""
    case.patch(many_files_patch(case.root).encode())
    srt = case.root / "python/sglang/srt"
    moved = case.outside / "srt"
    seen = {"n": 0}
    real_fault = faults.fault

    def move(name: str) -> None:
        real_fault(name)
        if name == "rename":  # the renames go one by one (the temporary files, several at once)
            seen["n"] += 1
            if seen["n"] == 3:
                os.rename(srt, moved)
                srt.symlink_to(moved, target_is_directory=True)

    monkeypatch.setattr("patchkit.engine.txn.fault", move)
    with pytest.raises(errors.UnsafePathError) as info:
        case.apply()
    assert "symlink" in str(info.value)
    for i in range(2, 6):  # the files after the move were not written out there
        assert (moved / ("m%d.py" % i)).read_bytes() == b"v = %d\n" % i


# -- 5: .patchkit pointing elsewhere ------------------------------------------------------------


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return Case(tmp_path)


def simple_patch(case: Case) -> None:
    old = (case.root / MOD).read_bytes()
    case.patch(diff_files(old, old.replace(b"return x + 3\n", b"return x + 33\n"), MOD).encode())


def test_patchkit_dir_as_a_symlink_outside_is_refused(case: Case) -> None:
    simple_patch(case)
    elsewhere = case.outside / "state"
    elsewhere.mkdir()
    (case.root / ".patchkit").symlink_to(elsewhere, target_is_directory=True)
    before = digest(case.root)
    with pytest.raises(errors.TargetError) as info:
        case.apply()
    assert ".patchkit" in str(info.value) and "symlink" in str(info.value)
    assert list(elsewhere.iterdir()) == []
    assert digest(case.root) == before
    with pytest.raises(errors.TargetError):
        api.status(Catalog(case.catalog_dir), case.target)


def test_patchkit_as_a_regular_file_is_a_clear_error(case: Case) -> None:
    simple_patch(case)
    (case.root / ".patchkit").write_text("not a directory\n")
    before = digest(case.root)
    with pytest.raises(errors.TargetError) as info:
        case.apply()
    assert ".patchkit" in str(info.value) and "not a directory" in str(info.value)
    assert digest(case.root) == before


# -- 6: one file, two spellings -----------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["python/./sglang/srt/mod.py", "python//sglang/srt/mod.py",
                                      "python/sglang/srt/alias.py"])
def test_one_file_two_spellings_in_one_patch_keeps_both_edits(case: Case, spelling: str) -> None:
    (case.root / "python/sglang/srt/alias.py").symlink_to("mod.py")
    old = (case.root / MOD).read_bytes()
    mid = old.replace(b"return x + 3\n", b"return x + 33\n")
    new = mid.replace(b"return x + 30\n", b"return x + 300\n")
    body = diff_files(old, mid, MOD) + diff_files(mid, new, "python/sglang/srt/alias.py").replace(
        "python/sglang/srt/alias.py", spelling)
    case.patch(body.encode())
    case.apply()
    assert (case.root / MOD).read_bytes() == new  # both edits, none lost
    case.rollback()
    assert (case.root / MOD).read_bytes() == old


def test_one_file_two_spellings_across_two_fixes_blocks_the_forced_rollback(case: Case) -> None:
    (case.root / "python/sglang/srt/alias.py").symlink_to("mod.py")
    old = (case.root / MOD).read_bytes()
    mid = old.replace(b"return x + 3\n", b"return x + 33\n")
    new = mid.replace(b"return x + 30\n", b"return x + 300\n")
    case.patch(diff_files(old, mid, MOD).encode())
    (case.catalog_dir / "manifests/g.toml").write_text(
        (case.catalog_dir / "manifests/h.toml").read_text().replace('name = "h"', 'name = "g"')
        .replace("0001-h.patch", "0001-g.patch"))
    (case.catalog_dir / "patches/g").mkdir()
    (case.catalog_dir / "patches/g/0001-g.patch").write_text(
        diff_files(mid, new, "python/sglang/srt/alias.py"))
    cat = Catalog(case.catalog_dir)
    api.apply(cat, case.target, ["h"])
    api.apply(cat, case.target, ["g"])
    assert (case.root / MOD).read_bytes() == new
    with pytest.raises(errors.PreconditionFailed) as info:
        api.rollback(cat, case.target, ["h"], force=True)
    assert "g" in str(info.value)
    assert (case.root / MOD).read_bytes() == new  # g's change is still there


# -- 7: another process edits a file in place during the apply ----------------------------------


@pytest.mark.parametrize("when", ["journal:1", "rename:1"])
def test_in_place_edit_during_apply_aborts_and_keeps_the_edit(case: Case, monkeypatch: pytest.MonkeyPatch,
                                                               when: str) -> None:
    simple_patch(case)
    path = case.root / MOD
    point, n = when.split(":")
    real_fault = faults.fault
    count = {"n": 0}

    def edit(name: str) -> None:
        real_fault(name)
        if name == point:
            count["n"] += 1
            if count["n"] == int(n):
                with open(path, "r+b") as fh:  # in place: same inode
                    fh.seek(0, os.SEEK_END)
                    fh.write(b"# edited in place\n")

    monkeypatch.setattr("patchkit.engine.txn.fault", edit)
    with pytest.raises(errors.PatchkitError) as info:
        case.apply()
    assert "changed while" in str(info.value) and MOD in str(info.value)
    assert path.read_bytes().endswith(b"# edited in place\n")  # the edit is not lost
    assert not (case.root / ".patchkit/state.json").exists()
    # and with the editor gone, the fix applies and rolls back
    path.write_bytes(path.read_bytes()[: -len(b"# edited in place\n")])
    monkeypatch.setattr("patchkit.engine.txn.fault", real_fault)
    case.apply()
    case.rollback()


def test_in_place_edit_after_apply_leaves_the_backup_intact(case: Case) -> None:
    simple_patch(case)
    path = case.root / MOD
    old = path.read_bytes()
    case.apply()
    with open(path, "r+b") as fh:  # in place, after the apply: drift, not a damaged backup
        fh.seek(0, os.SEEK_END)
        fh.write(b"# later\n")
    with pytest.raises(errors.DriftError):
        case.rollback()
    api.rollback(Catalog(case.catalog_dir), case.target, ["h"], force=True)
    assert path.read_bytes() == old


# -- 8: patches aimed at .patchkit/ or .git/ ----------------------------------------------------


@pytest.mark.parametrize("rel", [".patchkit/state.json", ".git/config", "python/.git/hooks/x",
                                 "scripts/../.patchkit/x"])
def test_patch_into_state_or_git_dir_is_refused(tmp_path: Path, rel: str) -> None:
    root = make_checkout(tmp_path, git_repo=True)
    case = Case(tmp_path, root)
    case.patch(diff_files(None, b"owned = 1\n", rel).encode())
    err = case.refused(errors.UnsafePathError)
    assert rel.split("/")[-2] in str(err) or ".." in str(err)


# -- 10: clear errors for what the file system refuses ------------------------------------------


def test_creating_a_file_under_an_existing_file_is_a_precondition(case: Case) -> None:
    case.patch(diff_files(None, b"x = 1\n", MOD + "/child.py").encode())
    err = case.refused(errors.PreconditionFailed, "not a directory")
    assert MOD in str(err)


def test_creating_a_file_where_a_directory_is(case: Case) -> None:
    case.patch(diff_files(None, b"x = 1\n", "python/sglang/srt").encode())
    err = case.refused(errors.PreconditionFailed, "is a directory")
    assert "writable" not in str(err)


def test_file_name_over_the_limit_is_refused(case: Case) -> None:
    case.patch(diff_files(None, b"x = 1\n", "python/sglang/" + "n" * 300 + ".py").encode())
    case.refused(errors.UnsafePathError, "255")


# -- 11: writability without probe files --------------------------------------------------------


def test_dry_run_creates_nothing_in_touched_directories(case: Case) -> None:
    """No probe file, not even one created and removed again: that changes the directory's
    ctime (which utime cannot put back), and a kill at that moment would leave it behind."""
    simple_patch(case)
    dirs = [case.root, case.root / "python/sglang/srt"]
    ctimes = [d.stat().st_ctime_ns for d in dirs]
    api.apply(Catalog(case.catalog_dir), case.target, ["h"], dry_run=True)
    assert [d.stat().st_ctime_ns for d in dirs] == ctimes


def test_an_unwritable_directory_is_still_found_without_probe_files(case: Case) -> None:
    simple_patch(case)
    srt = case.root / "python/sglang/srt"
    undo = _make_read_only(srt)
    try:
        before = digest(case.root)
        with pytest.raises(errors.PermissionDenied):
            case.apply()
        assert digest(case.root) == before
    finally:
        undo()


# -- 12: SIGTERM mid-write ----------------------------------------------------------------------


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGQUIT"])
def test_a_signal_during_verification_rolls_back_and_exits_128_plus_it(tmp_path: Path,
                                                                      signame: str) -> None:
    """SIGTERM, and SIGHUP (a dropped terminal or SSH session) and SIGQUIT too (issue 26)."""
    case = Case(tmp_path)
    simple_patch(case)
    marker = tmp_path / "verifying"
    (case.catalog_dir / "manifests/h.toml").write_text(
        (case.catalog_dir / "manifests/h.toml").read_text() + "\n[[verification]]\nkind = \"command\"\n"
        "argv = [\"sh\", \"-c\", \"touch %s; sleep 60\"]\n" % marker)
    before = digest(case.root)
    proc = subprocess.Popen([PY, "-m", "patchkit", "--catalog", str(case.catalog_dir),
                             "apply", "h", "--target", str(case.root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not marker.exists():  # the files are written; the verification runs
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    signum = getattr(signal, signame)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, (out, err)
    assert f"terminated by {signame}" in err, err
    assert digest(case.root) == before  # rolled back, no journal left for later
    assert not (case.root / ".patchkit" / "journal.json").exists()
    assert not (case.root / ".patchkit" / "lock-holder.json").exists()


def test_write_failure_after_the_commit_point_says_the_next_run_completes_it(case: Case) -> None:
    """The history line (written after state.json) cannot be appended: the apply is
    committed, and the error must say the next run completes it, not that it restores."""
    simple_patch(case)
    case.apply()
    case.rollback()
    history = case.root / ".patchkit/history.jsonl"
    if subprocess.run(["chattr", "+i", str(history)], capture_output=True).returncode:
        pytest.skip("chattr +i does not work here")
    try:
        with pytest.raises(errors.PermissionDenied) as info:
            case.apply()
    finally:
        subprocess.run(["chattr", "-i", str(history)], check=True)
    assert "completes the change" in str(info.value), str(info.value)
    result = api.status(Catalog(case.catalog_dir), case.target)
    assert [r["outcome"] for r in result.raw["recovered"]] == ["completed"]
    assert [(s.name, s.state) for s in result.status] == [("h", "applied")]
