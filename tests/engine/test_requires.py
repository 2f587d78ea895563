"""A required fix counts as applied when patchkit recorded it, or when the request carries it as
a dependency and its change is in the files (a fork that committed the prerequisite itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

from patchkit.engine import run

from .helpers import MOD, SCRIPT, file_record, fix, full_snapshot, git, request

INDEX_K, SIZING = "dsv4-bf16-index-k", "dsv4-bf16-sizing"


def index_k(root: Path, version: int = 2) -> Dict[str, Any]:
    """The prerequisite: two hunks in mod.py."""
    before = (root / MOD).read_text()
    after = before.replace("return x + 7\n", "return x * 7\n").replace("return x + 30\n", "return 30\n")
    return fix(INDEX_K, [file_record(MOD, before, after)], version=version)


def sizing(root: Path) -> Dict[str, Any]:
    """The dependent fix, on another file."""
    text = (root / SCRIPT).read_text()
    return fix(SIZING, [file_record(SCRIPT, text, text.replace("launching", "sizing"))],
               requires=[INDEX_K])


def apply(root: Path, fixes: List[Dict[str, Any]], deps: List[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
    return run(request("apply", {"sglang": root}, fixes, dependencies=deps, **extra))


def requires_result(result: Dict[str, Any]) -> Dict[str, Any]:
    pre = (result["fixes"][-1]["preconditions"] if result["ok"]
           else result["error"]["details"]["failures"])
    found = [p for p in pre if p["kind"] == "requires"]
    assert len(found) == 1, pre
    return found[0]


def commit_in_the_fork(root: Path, dep: Dict[str, Any]) -> None:
    """The fork carries the prerequisite as its own commit; patchkit never saw it."""
    text = (root / MOD).read_text()
    (root / MOD).write_text(text.replace("return x + 7\n", "return x * 7\n").replace("return x + 30\n", "return 30\n"))
    git(root, "commit", "-q", "-am", "count bf16 index-K bytes")


def test_requires_satisfied_by_presence_in_the_files(checkout: Path) -> None:
    dep = index_k(checkout)
    commit_in_the_fork(checkout, dep)
    dependent = sizing(checkout)
    result = apply(checkout, [dependent], [dep], dry_run=True)
    assert result["ok"], result["error"]
    req = requires_result(result)
    assert req["ok"] and req["detail"] == "present in the files, not recorded by patchkit"
    assert req["name"] == "requires %s" % INDEX_K

    result = apply(checkout, [dependent], [dep])
    assert result["ok"], result["error"]
    assert [f["name"] for f in result["fixes"]] == [SIZING]  # a dependency is looked at, never written
    assert "sizing" in (checkout / SCRIPT).read_text()
    status = run(request("status", {"sglang": checkout}, [dep, dependent]))["status"]["fixes"]
    assert [(s["name"], s["state"]) for s in status] == [(INDEX_K, "present-unrecorded"), (SIZING, "applied")]


def test_requires_satisfied_by_the_record(checkout: Path) -> None:
    dep = index_k(checkout, version=2)
    dependent = sizing(checkout)
    assert apply(checkout, [dep], [])["ok"]
    result = apply(checkout, [dependent], [dep])  # the record wins over looking in the files
    assert result["ok"], result["error"]
    req = requires_result(result)
    assert req["ok"] and req["detail"] == "recorded v2"


def test_requires_missing_names_the_fix_and_what_to_do(checkout: Path) -> None:
    dep = index_k(checkout)
    dependent = sizing(checkout)
    tree = full_snapshot(checkout)
    result = apply(checkout, [dependent], [dep])
    assert result["error"]["type"] == "PreconditionFailed"
    req = requires_result(result)
    assert not req["ok"]
    expected = ("fix %s is neither recorded by patchkit nor present in the files; apply it first "
                "(patchkit apply %s) or use --with-deps" % (INDEX_K, INDEX_K))
    assert req["detail"] == expected and expected in result["error"]["message"]
    assert full_snapshot(checkout) == tree
    # sync has no --with-deps: its advice says why it did not apply the prerequisite
    synced = requires_result(apply(checkout, [dependent], [dep], sync=True))
    assert "--with-deps" not in synced["detail"] and "sync did not apply it" in synced["detail"]
    # a dry run applied nothing anyway: it says what the sync would not do (a new-user trial)
    dry = requires_result(apply(checkout, [dependent], [dep], sync=True, dry_run=True))
    assert "sync would not apply it here" in dry["detail"], dry["detail"]
    assert full_snapshot(checkout) == tree

    # half of the prerequisite committed: still missing, and said so
    text = (checkout / MOD).read_text()
    (checkout / MOD).write_text(text.replace("return x + 7\n", "return x * 7\n"))
    git(checkout, "commit", "-q", "-am", "half of it")
    req = requires_result(apply(checkout, [dependent], [dep]))
    assert not req["ok"] and "only part of its change is in the files" in req["detail"]

    # without a copy of the dependency the engine cannot look in the files
    req = requires_result(apply(checkout, [dependent], []))
    assert not req["ok"] and "carries no copy" in req["detail"]
    assert "patchkit apply %s" % INDEX_K in req["detail"]


def test_a_dependency_in_a_root_the_target_lacks_is_absent(checkout: Path) -> None:
    dep = fix(INDEX_K, [file_record("run.sh", "a\n", "b\n", root="serve")], release=None)
    req = requires_result(apply(checkout, [sizing(checkout)], [dep]))
    assert not req["ok"] and "neither recorded" in req["detail"]


def test_a_fix_listed_as_both_fix_and_dependency_is_refused(checkout: Path) -> None:
    dep = index_k(checkout)
    result = apply(checkout, [dep, sizing(checkout)], [dep])
    assert result["error"]["type"] == "UsageError"
    assert INDEX_K in result["error"]["message"] and "dependencies" in result["error"]["message"]
    result = run(request("apply", {"sglang": checkout}, [], dependencies={"name": "x"}))
    assert result["error"]["type"] == "UsageError" and "dependencies must be a list" in result["error"]["message"]


def test_a_lost_dependency_partly_in_the_files_is_said_to_be_lost(checkout: Path) -> None:
    """The checkout moved to the next release under both fixes (a stash, a checkout, a pop
    that kept one of index-K's two hunks): index-K is recorded, and lost. Applying the
    dependent fix said "fix dsv4-bf16-index-k is not recorded by patchkit and only part of its
    change is in the files", though state.json records it (a new-user trial); now that it is
    recorded but lost, and only part of its change is in the files."""
    dep = index_k(checkout)
    assert apply(checkout, [index_k(checkout)], [])["ok"]
    pkg = checkout / "python" / "sglang"
    (pkg / "_version.py").write_text("version: str\n__version__ = version = '0.5.22'\n")
    (pkg / "srt" / "mod.py").write_text(  # index-K's first hunk kept, its second not
        (pkg / "srt" / "mod.py").read_text().replace("return 30\n", "return x + 30\n"))
    git(checkout, "commit", "-qam", "release 0.5.22")
    dependent = sizing(checkout)
    dependent["release"] = {"root": "sglang", "versions": ["0.5.22"]}
    req = requires_result(apply(checkout, [dependent], [dep], dry_run=True))
    assert not req["ok"]
    assert req["detail"].startswith("fix %s is recorded but lost (sglang 0.5.21 -> 0.5.22)" % INDEX_K), req
    assert "only part of its change is in the files" in req["detail"], req
    assert "not recorded by patchkit" not in req["detail"], req
