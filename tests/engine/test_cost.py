"""A production checkout has thousands of files: the engine reads only the files the request
touches, never lists a root's directories (its own ``.patchkit/`` aside), and runs one
``git status`` per root for the whole request (none at all for ``status``).

git is counted through a ``git`` on PATH that logs its arguments and runs the real one.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest

from patchkit.engine import run

from .helpers import MOD, SCRIPT, file_record, fix, git, request


@pytest.fixture
def git_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], List[List[str]]]:
    """Log every git the engine runs; the returned function gives the calls since the last one."""
    real = shutil.which("git")
    assert real
    bindir, log = tmp_path / "bin", tmp_path / "git.log"
    bindir.mkdir()
    wrapper = bindir / "git"
    # one write per call, so each line is one whole git command
    wrapper.write_text("#!/bin/sh\nline=$(printf '%%s\\t' \"$@\")\nprintf '%%s\\n' \"$line\" >> '%s'\n"
                       "exec '%s' \"$@\"\n" % (log, real))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]))

    def calls() -> List[List[str]]:
        lines = log.read_text().splitlines() if log.exists() else []
        log.write_text("")
        return [line.rstrip("\t").split("\t") for line in lines]
    return calls


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[List[str]]:
    """Every directory the engine lists (os.walk goes through os.scandir)."""
    seen: List[str] = []
    for name in ("scandir", "listdir"):
        real = getattr(os, name)

        def spy(path: Any = ".", _real: Any = real) -> Any:
            if not isinstance(path, int):  # shutil.rmtree lists by fd, inside .patchkit
                seen.append(os.fsdecode(path))
            return _real(path)
        monkeypatch.setattr(os, name, spy)
    yield seen


def outside_state(root: Path, listed: List[str]) -> List[str]:
    state = str(root / ".patchkit")
    return [p for p in listed if p.startswith(str(root)) and not p.startswith(state)]


def two_roots(tmp_path: Path, checkout: Path) -> Dict[str, Path]:
    serve = tmp_path / "serve"
    serve.mkdir()
    (serve / "run.sh").write_text("#!/bin/sh\nexec sglang\n")
    git(serve, "init", "-q")
    git(serve, "add", "-A")
    git(serve, "commit", "-q", "-m", "serve")
    return {"sglang": checkout, "serve": serve}


def test_apply_of_two_fixes_runs_one_git_status_per_root(tmp_path: Path, checkout: Path,
                                                        git_calls: Callable[[], List[List[str]]],
                                                        listings: List[str]) -> None:
    roots = two_roots(tmp_path, checkout)
    v0, s0 = (checkout / MOD).read_text(), (checkout / SCRIPT).read_text()
    v1 = v0.replace("return x + 7\n", "return x * 7\n")
    run_sh = file_record("run.sh", "#!/bin/sh\nexec sglang\n", "#!/bin/sh\nexec sglang --fast\n",
                         root="serve")
    a = fix("a", [file_record(MOD, v0, v1), run_sh])
    b = fix("b", [file_record(SCRIPT, s0, s0.replace("launching", "go")),
                  file_record(MOD, v1, v1.replace("return x + 9\n", "return x * 9\n"))], requires=["a"])
    git_calls()
    res = run(request("apply", roots, [a, b]))
    assert res["ok"], res["error"]
    calls = git_calls()
    status = [c for c in calls if "status" in c]
    assert sorted(c[1] for c in status) == sorted(str(p) for p in roots.values())
    assert len(calls) == len(status) == 2  # nothing else: the release came from _version.py
    by_root = {c[1]: c[c.index("--") + 1:] for c in status}
    # with the version file: a release put over the checkout uncommitted gets its own advice
    assert sorted(by_root[str(checkout)]) == sorted([MOD, SCRIPT, "python/sglang/_version.py"])
    assert by_root[str(roots["serve"])] == ["run.sh"]
    clean = [p for f in res["fixes"] for p in f["preconditions"] if p["kind"] == "git-clean"]
    assert [p["where"] for p in clean] == ["sglang:" + MOD, "serve:run.sh", "sglang:" + SCRIPT]
    assert all(p["ok"] and p["detail"] == "unmodified against HEAD" for p in clean)
    assert outside_state(checkout, listings) == [] and outside_state(roots["serve"], listings) == []


def test_status_reads_only_touched_files_and_runs_no_git(tmp_path: Path, checkout: Path,
                                                        git_calls: Callable[[], List[List[str]]],
                                                        listings: List[str]) -> None:
    bulk = checkout / "python" / "sglang" / "srt" / "bulk"
    for d in range(20):  # a tree the status must not look into
        (bulk / str(d)).mkdir(parents=True)
        for n in range(10):
            (bulk / str(d) / ("m%d.py" % n)).write_text("x = %d\n" % n)
    v0 = (checkout / MOD).read_text()
    a = fix("a", [file_record(MOD, v0, v0.replace("return x + 7\n", "return x * 7\n"))])
    b = fix("b", [file_record(SCRIPT, "x\n", "y\n")])
    assert run(request("apply", {"sglang": checkout}, [a]))["ok"]
    git_calls()
    del listings[:]
    res = run(request("status", {"sglang": checkout}, [a, b]))
    assert res["ok"], res["error"]
    assert [(f["name"], f["state"]) for f in res["status"]["fixes"]] == [("a", "applied"), ("b", "not-applied")]
    assert git_calls() == []
    # the one directory listed is the bytecode cache of the recorded file, where a stale .pyc
    # would be (docs/state.md, What is running); the bulk tree is never looked into
    own_cache = str((checkout / MOD).parent / "__pycache__")
    assert [p for p in outside_state(checkout, listings) if p != own_cache] == []


def test_a_root_outside_any_work_tree_runs_no_git(tmp_path: Path, git_calls: Callable[[], List[List[str]]]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "run.sh").write_text("a\n")
    f = fix("p", [file_record("run.sh", "a\n", "b\n", root="serve")], release=None)
    assert run(request("apply", {"serve": plain}, [f], state_root="serve"))["ok"]
    assert git_calls() == []
    assert (plain / "run.sh").read_text() == "b\n"


def test_a_root_inside_a_bigger_work_tree_maps_paths(tmp_path: Path) -> None:
    """The root is a subdirectory of a repository: git's paths carry the prefix."""
    repo = tmp_path / "mono"
    (repo / "deploy").mkdir(parents=True)
    (repo / "deploy" / "run.sh").write_text("a\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    (repo / "deploy" / "run.sh").write_text("a\n# local\n")
    f = fix("p", [file_record("run.sh", "a\n# local\n", "b\n# local\n", root="serve")], release=None)
    res = run(request("apply", {"serve": repo / "deploy"}, [f], dry_run=True, state_root="serve"))
    assert res["error"]["type"] == "PreconditionFailed"
    assert "serve:run.sh has uncommitted changes" in res["error"]["message"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the checkout to another user")
def test_a_checkout_git_refuses_to_read_is_not_a_reason_to_refuse(checkout: Path) -> None:
    """git will not read a repository another user owns ("dubious ownership"); the run goes
    on and says the clean check was not made, with git's reason."""
    v0 = (checkout / MOD).read_text()
    f = fix("a", [file_record(MOD, v0, v0.replace("return x + 7\n", "return x * 7\n"))])
    for dirpath, dirs, files in os.walk(checkout):
        for name in dirs + files + ["."]:
            os.lchown(os.path.join(dirpath, name), 65534, 65534)
    res = run(request("apply", {"sglang": checkout}, [f], dry_run=True))
    assert res["ok"], res["error"]
    clean = [p for p in res["fixes"][0]["preconditions"] if p["kind"] == "git-clean"]
    assert len(clean) == 1 and clean[0]["ok"]
    assert clean[0]["detail"].startswith("not checked: git status failed: ")
    assert "dubious ownership" in clean[0]["detail"]


def test_a_status_where_a_fix_moved_the_release_asks_git_nothing(
        checkout: Path, git_calls: Callable[[], List[List[str]]]) -> None:
    """A series from one release to the next (it writes the version file) moves the tree
    under the fixes recorded for the old release; whether that release holds their changes is
    a question about a move git made (observe.release_holds), and a status asked git about
    each of them: a `git status` per fix, 32 ms of the drift status in docs/performance.md.
    The version file as a recorded fix wrote it answers it, with no git."""
    version = "python/sglang/_version.py"
    old = (checkout / version).read_text()
    mod = (checkout / MOD).read_text()
    moves = fix("moves", [file_record(version, old, old.replace("0.5.21", "0.5.22"))])
    other = fix("other", [file_record(MOD, mod, mod.replace("return x + 7\n", "return x * 7\n"))])
    assert run(request("apply", {"sglang": checkout}, [moves, other]))["ok"]
    git_calls()
    seen = run(request("status", {"sglang": checkout}, []))
    assert seen["ok"], seen["error"]
    assert {f["name"]: f["state"] for f in seen["status"]["fixes"]} == {"moves": "applied",
                                                                        "other": "applied"}
    assert not any("held" in f for f in seen["status"]["fixes"])
    assert git_calls() == []
