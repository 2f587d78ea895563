"""Crash at every step: a multi-file, multi-fix apply and rollback killed at EVERY occurrence of
every fault point, on a local target and (over a real sshd) on a remote one.

tests/engine/test_crash.py kills a one-fix run at a hand-picked sample of points. Here a dry
instrumented run counts how often each point is reached by ``apply pool-guard --with-deps``
(two fixes, two roots, two files, one changed by both fixes) and by its rollback, and the run is then killed (SIGKILL,
``PATCHKIT_FAULT=<point>:<n>``) at each n in turn: locally a child forked per kill (this
process has the engine loaded), remotely the host's engine over ssh. After each kill the next ``status`` must
report the recovery (remote: each kind of point once, plus the last write), and the tree must be byte-identical to before the killed run or fully
changed with ``verify`` passing. The number of injection points covered is printed by
``test_zz_injection_points_covered`` (visible with ``pytest -rA``) and kept in
docs/reliability.md.
"""

from __future__ import annotations

import atexit
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from patchkit import api, errors
from patchkit.catalog import Catalog
from patchkit.request_builder import build_request
from patchkit.engine import faults, run
from patchkit.targets.remote import RemoteTarget
from patchkit.targets import LocalTarget, Target
from tests.fixtures.sshd import SshServer
from tests.test_hostile import fill, tmpfs  # noqa: F401 (a fixture)
from tests.test_remote import Ssh, make_tree, snapshot

SAMPLES = Path(__file__).parent / "samples"
PY = sys.executable
FIXES = ["index-k-bytes", "pool-guard"]

#: every (side, op, point:n) killed by this module, filled as the tests run
COVERED: Dict[Tuple[str, str], List[str]] = {}


def catalog() -> Catalog:
    return Catalog(SAMPLES / "catalog")


def request(op: str, roots: Dict[str, str]) -> Dict[str, Any]:
    cat = catalog()
    fixes = (cat.apply_order(["pool-guard"], with_deps=True) if op == "apply"
             else cat.rollback_order(FIXES))
    return build_request(cat, fixes, op=op, roots=roots, state_root="sglang", python=PY)


def count_points(op: str, base: Path) -> Dict[str, int]:
    """How often ``op`` reaches each fault point: one instrumented run that kills nothing."""
    roots = make_tree(base)
    if op == "rollback":
        assert run(request("apply", roots))["ok"]
    old = os.environ.get("PATCHKIT_FAULT")
    os.environ["PATCHKIT_FAULT"] = "no-such-point:1"  # counting on, no kill
    try:
        result = run(request(op, roots))
        seen = dict(faults._seen)
    finally:
        faults.reset()
        if old is None:
            del os.environ["PATCHKIT_FAULT"]
        else:
            os.environ["PATCHKIT_FAULT"] = old
    assert result["ok"], result["error"]
    return seen


def occurrences(seen: Dict[str, int]) -> List[str]:
    return ["%s:%d" % (p, n) for p in faults.POINTS for n in range(1, seen.get(p, 0) + 1)]


_COUNTS: Dict[str, Dict[str, int]] = {}


def counts(op: str, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, int]:
    if op not in _COUNTS:
        _COUNTS[op] = count_points(op, tmp_path_factory.mktemp("count-" + op) / "tree")
    return _COUNTS[op]


def test_the_scenario_reaches_every_kind_of_point(tmp_path_factory: pytest.TempPathFactory) -> None:
    apply_seen, rollback_seen = counts("apply", tmp_path_factory), counts("rollback", tmp_path_factory)
    assert set(apply_seen) == set(rollback_seen) == set(faults.POINTS)
    # two files (pool.py, changed by both fixes, and serve.sh), each one temp file and one rename;
    # per-fix backups (pool.py before each fix, serve.sh), the first fix's also the transaction's
    # original; a rollback keeps one original per file
    assert apply_seen["write"] == apply_seen["rename"] == rollback_seen["write"] == 2
    assert apply_seen["backup"] == 3 and rollback_seen["backup"] == 2


def kill_local(req: dict[str, Any], point: str) -> None:
    """Run ``req`` in a child process told to die at ``point``: forked from this one, which has
    the engine imported already (a fresh interpreter per kill cost a second each), the same
    engine on the request as the host's JSON reads it; it must die by SIGKILL."""
    pid = os.fork()
    if pid == 0:  # the child: the engine run, then an exit code that says it was not killed
        code = 3
        try:
            faults.reset()
            os.environ["PATCHKIT_FAULT"] = point
            result = run(json.loads(json.dumps(req)))
            code = 4 if result.get("ok") else 5
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (point, status)


def kill_remote(ssh: Ssh, roots: Dict[str, str], req: Dict[str, Any], point: str) -> None:
    target = RemoteTarget(ssh.spec(f"SetEnv=PATCHKIT_FAULT={point}"), roots, ssh.python)
    with pytest.raises(errors.ConnectionLost):
        target.run(req)


def check_recovered(target: Target, roots: Dict[str, str], op: str, point: str,
                    before: Dict[str, str], after: Dict[str, str]) -> str:
    """The next status (on ``target``) reports the recovery; the tree is as before, or fully
    changed and verified. The follow-up checks run in-process: the same engine on the same files."""
    result = api.status(catalog(), target)
    target = LocalTarget(roots, PY, "local")
    recovered = result.raw["recovered"]
    assert [(r["op"], sorted(r["fixes"])) for r in recovered] == [(op, FIXES)], (point, recovered)
    outcome = recovered[0]["outcome"]
    found = {s.name: s.state for s in result.status}
    sglang = Path(roots["sglang"])
    assert result.raw["status"]["journal"] is None
    assert not (sglang / ".patchkit/journal.json").exists()
    assert not (sglang / ".patchkit/lock-holder.json").exists()
    assert not list(sglang.rglob("*.patchkit-tmp")) and not list(Path(roots["serve"]).rglob("*.patchkit-tmp"))
    txn = sglang / ".patchkit/txn"
    assert not txn.exists() or list(txn.iterdir()) == []
    committed_before_kill = point.startswith("cleanup")
    assert outcome == ("completed" if committed_before_kill else "rolled-back"), (point, outcome)
    now = snapshot(roots)
    assert now == (after if outcome == "completed" else before), point
    applied = (op == "apply") == (outcome == "completed")
    if applied:
        assert found["index-k-bytes"] == found["pool-guard"] == "applied", (point, found)
        checked = api.verify(catalog(), target, FIXES)
        assert all(c.ok for f in checked.fixes for c in f.verification), point
        assert sum(len(f.verification) for f in checked.fixes) >= 4
    else:
        assert found["index-k-bytes"] == found["pool-guard"] == "not-applied", (point, found)
    assert api.status(catalog(), target).raw["recovered"] == []  # recovery is done once
    return outcome


_AFTER: list[dict[str, str]] = []
_APPLIED: list[tuple[Path, dict[str, str]]] = []


def applied_tree(base: Path) -> dict[str, str]:
    """The sample roots at ``base`` with both fixes applied, as an apply run there leaves them:
    one tree is applied per session, with verification, and copied; its state's record of
    where the roots are (state.json, the one file that names them) is moved with it."""
    if not _APPLIED:
        where = Path(tempfile.mkdtemp(prefix="patchkit-applied-tree-"))
        atexit.register(shutil.rmtree, where, True)
        original = make_tree(where / "tree")
        before = snapshot(original)
        assert run(request("apply", original))["ok"]
        _APPLIED.append((where / "tree", before))
    template = _APPLIED[0][0]
    shutil.copytree(template, base, symlinks=True)
    for path in (base / "sglang" / ".patchkit").rglob("*"):
        if path.is_file() and str(template).encode() in path.read_bytes():
            assert path.name == "state.json", path  # no other file records a root's path
            path.write_bytes(path.read_bytes().replace(str(template).encode(), str(base).encode()))
    return {"sglang": str(base / "sglang"), "serve": str(base / "serve")}


def full_apply_before() -> dict[str, str]:
    """The snapshot of the sample roots before the apply :func:`applied_tree` copies."""
    return _APPLIED[0][1]


def full_apply(base: Path) -> dict[str, str]:
    """The snapshot of a twin tree after a full apply (relative names and bytes: made once)."""
    if not _AFTER:
        twin = make_tree(base)
        assert run(request("apply", twin))["ok"]
        _AFTER.append(snapshot(twin))
    return _AFTER[0]


def crash_case(side: str, op: str, point: str, base: Path, ssh: Any = None,
               variant: str = "") -> None:
    """Kill ``op`` at ``point``, then recover with the next status. ``variant``: ``moved``,
    the tree is moved after the kill and a decoy tree takes its old path (recovery must act
    on the moved tree and never touch the decoy); ``full``, the tree's file system (a tmpfs
    ``base`` lies on) is filled to the last block after the kill (recovery needs no space)."""
    if op == "rollback":
        roots = applied_tree(base)
        before, after = snapshot(roots), full_apply_before()  # the tree before / after the op
    else:
        roots = make_tree(base)
        before, after = snapshot(roots), None
    req = request(op, roots)
    if side == "local":
        kill_local(req, point)
    else:
        kill_remote(ssh, roots, req, point)
    if after is None:  # the bytes a full apply gives, from a twin tree (the same every case)
        after = full_apply(base.parent / (base.name + "-twin"))
    decoy = filler = None
    if variant == "moved":
        new = base.parent / (base.name + "-moved")
        os.rename(base, new)
        roots = {k: v.replace(str(base), str(new), 1) for k, v in roots.items()}
        decoy = make_tree(base)
        decoy_before = snapshot(decoy, state=True)
    elif variant == "full":
        filler = fill(base.parent)
    target: Target = (LocalTarget(roots, PY, "local") if side == "local"
                      else RemoteTarget(ssh.spec(), roots, ssh.python))
    try:
        check_recovered(target, roots, op, point, before, after)
    finally:
        if filler is not None:
            filler.unlink()
    if decoy is not None:
        assert snapshot(decoy, state=True) == decoy_before, point  # nothing written at the old path
    COVERED.setdefault((side + ("-" + variant if variant else ""), op), []).append(point)


def sweep_dir(base: Path, i: int) -> Path:
    """A fresh directory for case ``i`` (the last case's trees are removed: a tmpfs is small)."""
    for old in base.iterdir() if base.exists() else []:
        if old.name.startswith("c") and old.is_dir():
            shutil.rmtree(old)
    return base / ("c%d" % i) / "tree"


def test_killed_local_apply_at_every_occurrence(tmp_path: Path,
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    points = occurrences(counts("apply", tmp_path_factory))
    for i, point in enumerate(points):
        crash_case("local", "apply", point, tmp_path / ("c%d" % i) / "tree")
    assert COVERED[("local", "apply")] == points


def test_killed_local_rollback_at_every_occurrence(tmp_path: Path,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    points = occurrences(counts("rollback", tmp_path_factory))
    for i, point in enumerate(points):
        crash_case("local", "rollback", point, tmp_path / ("c%d" % i) / "tree")
    assert COVERED[("local", "rollback")] == points


@pytest.mark.parametrize("op", ["apply", "rollback"])
@pytest.mark.parametrize("variant", ["moved", "full"])
def test_killed_local_run_then_moved_or_disk_full(op: str, variant: str, tmp_path: Path,
                                                  tmp_path_factory: pytest.TempPathFactory,
                                                  request: pytest.FixtureRequest) -> None:
    """Every occurrence of every point, then the checkout moved (a decoy at the old path) or
    its disk full: 0 half-applied trees, 0 writes outside the roots (docs/reliability.md)."""
    base = request.getfixturevalue("tmpfs") if variant == "full" else tmp_path
    points = occurrences(counts(op, tmp_path_factory))
    for i, point in enumerate(points):
        crash_case("local", op, point, sweep_dir(base, i), variant=variant)
    assert COVERED[("local-" + variant, op)] == points


@pytest.fixture(scope="module")
def host_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The host's interpreter in the remote sweep: this Python without ``site`` (``-S``). The
    engine and the sample catalog's checks need only the standard library; the venv's site (its
    editable install's import finder) cost about 0.1 s of each of the sweep's 100-odd sessions."""
    path = tmp_path_factory.mktemp("host-python") / "python"
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(PY)} -S "$@"\n')
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def ssh(sshd: SshServer, tmp_path: Path, host_python: str) -> Ssh:
    reach = Ssh(sshd, tmp_path)
    reach.python = host_python  # type: ignore[attr-defined]
    return reach


@pytest.mark.ssh
@pytest.mark.parametrize("op", ["apply", "rollback"])
def test_killed_remote_run_at_every_kind_of_point(op: str, ssh: Ssh, tmp_path: Path,
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """Over ssh (``SetEnv=PATCHKIT_FAULT``) each kind of point once, the first and the last
    file write: the host engine dies, the next remote ``status`` recovers."""
    seen = counts(op, tmp_path_factory)
    points = ["%s:1" % p for p in faults.POINTS] + ["write:%d" % seen["write"]]
    for i, point in enumerate(points):
        crash_case("remote", op, point, tmp_path / ("c%d" % i) / "tree", ssh)
    assert COVERED[("remote", op)] == points


@pytest.mark.ssh
@pytest.mark.parametrize("op", ["apply", "rollback"])
@pytest.mark.parametrize("variant", ["moved", "full"])
def test_killed_remote_run_then_moved_or_disk_full(op: str, variant: str, ssh: Ssh, tmp_path: Path,
                                                   tmp_path_factory: pytest.TempPathFactory,
                                                   request: pytest.FixtureRequest) -> None:
    """Over ssh, each kind of point once and the last write, then moved or full."""
    base = request.getfixturevalue("tmpfs") if variant == "full" else tmp_path
    seen = counts(op, tmp_path_factory)
    points = ["%s:1" % p for p in faults.POINTS] + ["write:%d" % seen["write"]]
    for i, point in enumerate(points):
        crash_case("remote", op, point, sweep_dir(base, i), ssh, variant=variant)
    assert COVERED[("remote-" + variant, op)] == points


def test_zz_injection_points_covered(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The count docs/reliability.md reports (printed; see it with ``pytest -rA``)."""
    total = sum(len(v) for v in COVERED.values())
    lines = ["%s %s: %d kills (%s)" % (side, op, len(v), ", ".join(v))
             for (side, op), v in sorted(COVERED.items())]
    print("fault injection points covered: %d\n%s" % (total, "\n".join(lines)))
    expected = len(occurrences(counts("apply", tmp_path_factory))) + len(
        occurrences(counts("rollback", tmp_path_factory)))
    assert len(COVERED.get(("local", "apply"), [])) + len(COVERED.get(("local", "rollback"), [])) == expected
