"""Apply, status, verify and rollback through ``patchkit.engine.run`` on real git checkouts."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit.engine import run

from .helpers import (MOD, SCRIPT, content_snapshot, file_record, fix, git, lock_held_elsewhere,
                      request, snapshot)

NEW = "python/sglang/srt/layers/fresh.py"


def series(root: Path, version: int = 1, **extra: Any) -> Dict[str, Any]:
    """A fix that modifies mod.py (CRLF-free), creates a file in a new dir, deletes nothing."""
    before = (root / MOD).read_text()
    after = before.replace("return x + 7\n", "return x * 7\n").replace("return x + 33\n", "return 33\n")
    script_before = (root / SCRIPT).read_text()
    return fix("a", [file_record(MOD, before, after),
                     file_record(NEW, None, "FRESH = True\n", mode="100755"),
                     file_record(SCRIPT, script_before, script_before.replace("launching", "go"),
                                 patch="0002-b.patch")], version=version, **extra)


def go(op: str, root: Path, fixes: List[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
    return run(request(op, {"sglang": root}, fixes, **extra))


def test_apply_status_rollback_round_trip(checkout: Path) -> None:
    f = series(checkout)
    (checkout / "python/sglang/srt/__pycache__").mkdir()
    (checkout / "python/sglang/srt/__pycache__/mod.cpython-311.pyc").write_bytes(b"stale")
    original = (checkout / MOD).read_bytes()
    tree = snapshot(checkout)
    res = go("apply", checkout, [f])
    assert res["ok"], res["error"]
    out = res["fixes"][0]
    assert out["outcome"] == "applied"
    assert [(x["path"], x["op"]) for x in out["files"]] == [(MOD, "modify"), (NEW, "create"), (SCRIPT, "modify")]
    assert "+    return x * 7\n" in out["files"][0]["diff"]
    assert [h["expected_line"] for h in out["files"][0]["hunks"]] == [20, 98]
    assert "return x * 7" in (checkout / MOD).read_text()
    assert stat.S_IMODE((checkout / NEW).stat().st_mode) == 0o755
    assert stat.S_IMODE((checkout / SCRIPT).stat().st_mode) == 0o755
    assert not (checkout / "python/sglang/srt/__pycache__").exists()  # stale bytecode purged
    assert (checkout / ".patchkit/.gitignore").read_text() == "*\n"

    state = json.loads((checkout / ".patchkit/state.json").read_text())
    assert state["format"] == 1 and [x["name"] for x in state["fixes"]] == ["a"]
    assert state["fixes"][0]["files"][0]["backup"] == "backups/a/0"  # flat: one directory per fix
    assert (checkout / ".patchkit/backups/a/0").read_bytes() == original
    status = go("status", checkout, [f])["status"]
    assert status["fixes"][0]["state"] == "applied" and status["journal"] is None
    assert {x["state"] for x in status["fixes"][0]["files"]} == {"ok"}

    res = go("rollback", checkout, [f])
    assert res["ok"], res["error"]
    assert res["fixes"][0]["outcome"] == "rolled-back"
    after = snapshot(checkout)
    tree.pop("python/sglang/srt/__pycache__"), tree.pop("python/sglang/srt/__pycache__/mod.cpython-311.pyc")
    assert strip_mtimes(after) == strip_mtimes(tree)  # same bytes and modes; new dir gone
    assert git(checkout, "status", "--porcelain") == ""
    assert git(checkout, "status", "--porcelain", "--ignored") == "!! .patchkit/\n"
    assert go("status", checkout, [f])["status"]["fixes"][0]["state"] == "not-applied"
    history = [json.loads(x) for x in (checkout / ".patchkit/history.jsonl").read_text().splitlines()]
    assert [(h["event"], h["fixes"][0]["name"]) for h in history] == [("apply", "a"), ("rollback", "a")]


def strip_mtimes(snap: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v[:3] if v[0] == "file" else v for k, v in snap.items()}


def test_dry_run_writes_nothing(checkout: Path) -> None:
    tree = snapshot(checkout, skip_state=False)
    res = go("apply", checkout, [series(checkout)], dry_run=True)
    assert res["ok"] and res["dry_run"]
    out = res["fixes"][0]
    assert out["outcome"] == "would-apply" and out["verification"] == []
    assert out["files"][1]["diff"].startswith("--- /dev/null\n+++ b/%s\n" % NEW)
    assert snapshot(checkout, skip_state=False) == tree  # bytes, modes, mtimes; no .patchkit either
    assert git(checkout, "status", "--porcelain") == ""


def test_reapply_is_a_no_op_and_another_version_is_an_upgrade(checkout: Path) -> None:
    first = series(checkout)
    assert go("apply", checkout, [first])["ok"]
    tree, state = snapshot(checkout), (checkout / ".patchkit/state.json").read_bytes()
    f = series(checkout)  # content irrelevant: already applied at this version
    res = go("apply", checkout, [f])
    assert res["ok"] and res["fixes"][0]["outcome"] == "already-applied"
    assert snapshot(checkout) == tree and (checkout / ".patchkit/state.json").read_bytes() == state
    res = go("apply", checkout, [dict(first, version=2)])  # the same change as version 2
    assert res["ok"] and res["fixes"][0]["outcome"] == "upgraded", res["error"]
    assert res["fixes"][0]["from_version"] == 1
    assert content_snapshot(checkout) == {k: v[:3] if v[0] == "file" else v for k, v in tree.items()}
    assert [f["version"] for f in json.loads((checkout / ".patchkit/state.json").read_text())["fixes"]] == [2]


def test_failed_verification_restores_every_byte(checkout: Path) -> None:
    checks = [{"kind": "grep", "root": "sglang", "path": MOD, "pattern": "x * 7", "count": 1, "name": "edit there"},
              {"kind": "command", "root": "sglang", "argv": ["{python}", "-c", "import sys; print('nope'); sys.exit(2)"],
               "name": "smoke test"}]
    tree = snapshot(checkout)
    res = go("apply", checkout, [series(checkout, verification=checks)])
    assert res["error"]["type"] == "VerificationFailed"
    assert [f["name"] for f in res["error"]["details"]["failures"]] == ["smoke test"]
    assert "nope" in res["error"]["message"]
    now = snapshot(checkout)
    assert strip_mtimes(now) == strip_mtimes(tree)
    assert not (checkout / "python/sglang/srt/layers").exists()
    assert git(checkout, "status", "--porcelain") == ""
    assert not (checkout / ".patchkit").exists()  # nothing committed: no trace of the attempt


FAILING = [{"kind": "command", "root": "sglang", "name": "smoke test",
            "argv": ["{python}", "-c", "import sys; sys.exit(2)"]}]


def bytes_and_modes(root: Path) -> Dict[str, Any]:
    """Every path under root, .git and .patchkit included: type, mode and bytes (no times, as
    restoring a file writes it anew)."""
    snap = {k: v[:3] if v[0] == "file" else v for k, v in snapshot(root, skip_git=False, skip_state=False).items()}
    snap["."] = ("dir", root.stat().st_mode)
    return snap


@pytest.mark.parametrize("prior", ["fresh", "with-state", "with-state-no-txn-dir"])
def test_failed_verification_leaves_patchkit_dir_as_it_was(checkout: Path, prior: str) -> None:
    if prior != "fresh":
        text = (checkout / SCRIPT).read_text()
        other = fix("z", [file_record(SCRIPT, text, text.replace("launching", "starting"))])
        assert go("apply", checkout, [other])["ok"]
        if prior == "with-state-no-txn-dir":
            (checkout / ".patchkit/txn").rmdir()
    before = (checkout / MOD).read_text()
    f = fix("a", [file_record(MOD, before, before.replace("return x + 7\n", "return x * 7\n")),
                  file_record(NEW, None, "FRESH = True\n")], verification=FAILING)
    tree = bytes_and_modes(checkout)
    res = go("apply", checkout, [f])
    assert res["error"]["type"] == "VerificationFailed"
    assert bytes_and_modes(checkout) == tree
    assert (checkout / ".patchkit").exists() is (prior != "fresh")


def test_lock_busy(checkout: Path) -> None:
    with lock_held_elsewhere(checkout) as pid:
        res = go("apply", checkout, [series(checkout)], lock_timeout=0.2)
        assert res["error"]["type"] == "LockBusy" and "pid %d" % pid in res["error"]["message"]
        assert go("status", checkout, [], lock_timeout=0.2)["error"]["type"] == "LockBusy"
    assert go("apply", checkout, [series(checkout)], lock_timeout=0.2)["ok"]


@pytest.mark.parametrize("strategy, edit", [("restore", "append"), ("reverse", "append"),
                                             ("reverse", "a line the fix wrote")])
def test_drift_refuses_rollback_and_force_restores(checkout: Path, strategy: str, edit: str) -> None:
    """--force discards the edits: the backups go back whatever the strategy (a series
    reversed over an edit of its own lines does not apply: --force used to fail there)."""
    f = series(checkout, rollback={"strategy": strategy})
    original = (checkout / MOD).read_bytes()
    assert go("apply", checkout, [f])["ok"]
    if edit == "append":
        with open(checkout / MOD, "a") as fh:
            fh.write("# hand edit\n")
    else:
        before, after = original.decode().splitlines(True), (checkout / MOD).read_text().splitlines(True)
        written = next(i for i, line in enumerate(after) if i >= len(before) or line != before[i])
        after[written] = "# edited by hand\n"
        (checkout / MOD).write_text("".join(after))
    edited = snapshot(checkout)
    status = go("status", checkout, [f])["status"]["fixes"][0]
    assert status["state"] == "drifted"
    assert [x["state"] for x in status["files"]] == ["drifted", "ok", "ok"]
    res = go("rollback", checkout, [f])
    assert res["error"]["type"] == "DriftError"
    assert "sglang:%s" % MOD in res["error"]["message"] and "--force" in res["error"]["message"]
    assert snapshot(checkout) == edited
    res = go("rollback", checkout, [f], force=True)
    assert res["ok"], res["error"]
    assert (checkout / MOD).read_bytes() == original
    assert git(checkout, "status", "--porcelain") == ""


def test_reverse_strategy_rollback(checkout: Path) -> None:
    f = series(checkout, rollback={"strategy": "reverse"})
    assert go("apply", checkout, [f])["ok"]
    res = go("rollback", checkout, [f])
    assert res["ok"], res["error"]
    assert res["fixes"][0]["files"][0]["hunks"][0]["index"] == 1
    assert git(checkout, "status", "--porcelain") == ""


def test_rollback_refusals(checkout: Path) -> None:
    a = series(checkout)
    res = go("rollback", checkout, [a])
    assert res["ok"] and res["fixes"][0]["outcome"] == "not-applied"  # nothing to do (issue 25)
    before = (checkout / MOD).read_text()  # b builds on a's result
    b_before = before.replace("return x + 7\n", "return x * 7\n").replace("return x + 33\n", "return 33\n")
    b = fix("b", [file_record(MOD, b_before, b_before.replace("return x + 1\n", "return 1\n"))], requires=["a"])
    res = go("apply", checkout, [a, b])
    assert res["ok"], res["error"]
    res = go("rollback", checkout, [a])
    assert res["error"]["type"] == "PreconditionFailed"
    assert "applied fix b requires a" in res["error"]["message"] and "patchkit rollback b" in res["error"]["message"]
    res = go("rollback", checkout, [b, a])
    assert res["ok"], res["error"]
    assert git(checkout, "status", "--porcelain") == ""


def test_verify_op(checkout: Path) -> None:
    good = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "x * 7", "count": 1}
    f = series(checkout, verification=[good])
    assert go("verify", checkout, [f])["error"]["type"] == "NotApplied"
    assert go("apply", checkout, [f])["ok"]
    res = go("verify", checkout, [f])
    assert res["ok"] and res["fixes"][0]["outcome"] == "verified"
    (checkout / MOD).write_text((checkout / MOD).read_text().replace("x * 7", "x + 7"))
    tree, state = snapshot(checkout), (checkout / ".patchkit/state.json").read_bytes()
    res = go("verify", checkout, [f])
    assert res["error"]["type"] == "VerificationFailed"
    assert snapshot(checkout) == tree and (checkout / ".patchkit/state.json").read_bytes() == state


def test_partly_present_by_a_series_for_another_release_is_not_applied(checkout: Path) -> None:
    """A clean install of an older release (0.5.21 here) was called partly-present by a fix
    whose only series is for 0.5.23 (some of its lines stand there by chance), and failed
    status --exit-code. Looked at with a series for other releases, a partial match says
    nothing: not-applied, saying why."""
    text = (checkout / MOD).read_text()
    elsewhere = series(checkout, release={"root": "sglang", "versions": ["0.5.23"]})
    here = series(checkout)  # the same change, for 0.5.21
    (checkout / MOD).write_text(text.replace("return x + 7\n", "return x * 7\n"))
    [seen] = go("status", checkout, [elsewhere])["status"]["fixes"]
    assert seen["state"] == "not-applied", seen
    assert "no version of the fix serves 0.5.21 (v1 is for 0.5.23)" in seen["detail"]
    assert go("status", checkout, [here])["status"]["fixes"][0]["state"] == "partly-present"


def test_status_detects_present_and_partly_present_unrecorded_fixes(checkout: Path) -> None:
    f = series(checkout)
    assert go("status", checkout, [f])["status"]["fixes"][0]["state"] == "not-applied"
    assert not (checkout / ".patchkit").exists()  # status on an untouched target writes nothing
    # someone applied the change by hand, without patchkit
    text = (checkout / MOD).read_text()
    (checkout / MOD).write_text(text.replace("return x + 7\n", "return x * 7\n"))
    assert go("status", checkout, [f])["status"]["fixes"][0]["state"] == "partly-present"
    (checkout / MOD).write_text(text.replace("return x + 7\n", "return x * 7\n").replace("return x + 33\n", "return 33\n"))
    (checkout / NEW).parent.mkdir()
    (checkout / NEW).write_text("FRESH = True\n")
    (checkout / SCRIPT).write_text((checkout / SCRIPT).read_text().replace("launching", "go"))
    entry = go("status", checkout, [f])["status"]["fixes"][0]
    assert entry["state"] == "present-unrecorded" and entry["applied_at"] is None


def test_status_sees_through_patches_that_edit_each_other(checkout: Path) -> None:
    v0 = (checkout / MOD).read_text()
    v1 = v0.replace("return x + 3\n", "return x + 3  # one\n")
    v2 = v1.replace("return x + 3  # one\n", "return x + 3  # two\n")
    f = fix("s", [file_record(MOD, v0, v1), file_record(MOD, v1, v2, patch="0002-b.patch")])
    (checkout / MOD).write_text(v2)
    assert go("status", checkout, [f])["status"]["fixes"][0]["state"] == "present-unrecorded"


def test_two_roots_and_a_delete(tmp_path: Path, checkout: Path) -> None:
    serve = tmp_path / "serve"
    serve.mkdir()
    (serve / "run.sh").write_text("#!/bin/sh\nexec sglang\n")
    (serve / "old.conf").write_text("x=1\n")
    os.chmod(serve / "run.sh", 0o750)
    tree = snapshot(serve)
    f = fix("multi", [file_record("run.sh", "#!/bin/sh\nexec sglang\n", "#!/bin/sh\nexec sglang --fast\n", root="serve"),
                      file_record("old.conf", "x=1\n", None, root="serve")], release=None)
    res = run(request("apply", {"sglang": checkout, "serve": serve}, [f]))
    assert res["ok"], res["error"]
    assert not (serve / "old.conf").exists() and stat.S_IMODE((serve / "run.sh").stat().st_mode) == 0o750
    assert not (serve / ".patchkit").exists() and (checkout / ".patchkit/state.json").exists()
    res = run(request("rollback", {"sglang": checkout, "serve": serve}, [f]))
    assert res["ok"], res["error"]
    assert strip_mtimes(snapshot(serve)) == strip_mtimes(tree)


def test_an_apply_keeps_nothing_on_disk_outside_the_target(checkout: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's only state is the target's .patchkit/: an apply (a placed file, a created
    one, a file two patches change) leaves nothing in the user's cache directories that a later
    apply could read back instead of placing the hunks and diffing the files again."""
    from patchkit.targets import LocalTarget

    cache, xdg = tmp_path / "cache", tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(cache))
    local = LocalTarget({"sglang": str(checkout)})
    f = series(checkout)
    before = (checkout / MOD).read_text()
    middle = before.replace("return x + 7\n", "return x * 7\n")
    f["files"] = [file_record(MOD, before, middle),
                  file_record(MOD, middle, middle.replace("return x + 33\n", "return 33\n"),
                              patch="0002-b.patch"),
                  file_record(NEW, None, "FRESH = True\n")]
    for _ in range(2):
        assert go("apply", checkout, [f], dry_run=True)["ok"]
        res = local.run(request("apply", {"sglang": checkout}, [f]))
        assert res["ok"], res["error"]
        assert local.run(request("rollback", {"sglang": checkout}, [f]))["ok"]
    kept = [str(p.relative_to(tmp_path)) for base in (cache, xdg) if base.exists()
            for p in base.rglob("*") if p.is_file()]
    assert kept == []


def test_a_directory_an_apply_empties_goes_and_a_rollback_makes_it_again(checkout: Path) -> None:
    """A fix deleting every file of a directory left it there, empty (a trial, on 0.5.22 ->
    0.5.23's drift), where git apply removes it: an empty directory under python/ imports as a
    namespace package. The apply removes it, its __pycache__ with it; the rollback puts the
    files back in it, and a crash recovery does too."""
    sub = checkout / "python/sglang/srt/gone"
    sub.mkdir()
    (sub / "a.py").write_text("A = 1\n")
    (sub / "b.py").write_text("B = 2\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "a package to delete")
    f = fix("a", [file_record("python/sglang/srt/gone/a.py", "A = 1\n", None),
                  file_record("python/sglang/srt/gone/b.py", "B = 2\n", None)])
    before = content_snapshot(checkout)
    (sub / "__pycache__").mkdir()
    (sub / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"stale")
    assert go("apply", checkout, [f])["ok"]
    assert not sub.exists()
    assert (checkout / "python/sglang/srt").is_dir()  # only what the deletes emptied
    assert go("rollback", checkout, [f])["ok"]
    assert content_snapshot(checkout) == before
    assert git(checkout, "status", "--porcelain") == ""
    from .test_crash import killed_run  # killed after the directory went, before the commit

    killed_run(request("apply", {"sglang": checkout}, [f]), "verify:1")
    assert not sub.exists()
    res = go("status", checkout, [f])
    assert res["recovered"][0]["outcome"] == "rolled-back", res
    assert content_snapshot(checkout) == before
