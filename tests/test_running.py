"""What runs from a target: real Python processes importing the sample tree (one spawning
workers with ``multiprocessing`` spawn, as SGLang does), found from ``/proc`` after an apply as
``restart pending``, cleared by restarting them; locally and over the test sshd. Bytecode
under a ``pycache_prefix`` is found and purged."""

from __future__ import annotations

import json
import os
import py_compile
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.targets import LocalTarget
from patchkit.targets.remote import RemoteTarget
from tests.test_remote import PY, SAMPLES, Ssh, cli, make_tree, ssh  # noqa: F401  (ssh is a fixture)

POOL = "python/sglang/srt/pool.py"

IMPORTER = """import sys
import sglang.srt.pool
print("ready", flush=True)
sys.stdin.read()
"""

SPAWNER = """import multiprocessing as mp, os, sys
sys.path.insert(0, sys.argv[1])

def work(q):
    import sglang.srt.pool
    q.put(os.getpid())
    sys.stdin = open(os.devnull)
    import time
    time.sleep(3600)

if __name__ == "__main__":
    import sglang.srt.pool
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    workers = [ctx.Process(target=work, args=(q,), daemon=True) for _ in range(2)]
    for w in workers:
        w.start()
    print(" ".join(str(q.get()) for _ in workers), flush=True)
    sys.stdin.read()
"""

Start = Callable[..., "Running"]


class Running:
    """A process group this test started; ``pids`` the processes it reported."""

    def __init__(self, proc: subprocess.Popen[str], pids: list[int]) -> None:
        self.proc, self.pids = proc, pids

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group is this process's own (by PID)
            self.proc.wait(timeout=30)
        self.proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start a Python process (its own session, so its workers go with it); every one is killed
    by its PID when the test ends."""
    started: list[Running] = []

    def run(source: str, *args: str, cwd: Path | None = None, env: dict[str, str | None] | None = None,
            spawner: bool = False, options: tuple[str, ...] = (), python: str = PY) -> Running:
        script = tmp_path / f"proc{len(started)}.py"
        script.write_text(source)
        # /proc dates a start to the clock tick: a process started within the tick of a change
        # (the tree just made) cannot be told to be after it, and status says restart pending
        time.sleep(2.0 / os.sysconf("SC_CLK_TCK"))
        proc = subprocess.Popen([python, *options, str(script), *args], cwd=cwd or tmp_path, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                                env={k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None})
        ran = Running(proc, [proc.pid])
        started.append(ran)
        first = proc.stdout.readline()  # type: ignore[union-attr]
        assert first, f"the process {script.name} did not start"
        if spawner:
            ran.pids += [int(p) for p in first.split()]
        return ran

    yield run
    for ran in started:
        ran.stop()


def pending(result: Any) -> dict[int, Any]:
    assert result.running is not None and result.running.available, result.running
    return {p.pid: p for p in result.running.pending}


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_restart_pending_names_each_process_and_a_restart_clears_it(
        kind: str, ssh: Ssh, tmp_path: Path, start: Start) -> None:
    roots = make_tree(tmp_path / "tree")
    target = (LocalTarget(roots, PY, "local") if kind == "local"
              else RemoteTarget(ssh.spec(), roots, PY))
    catalog = Catalog(SAMPLES / "catalog")
    package = os.path.join(roots["sglang"], "python")
    importer = start(IMPORTER, env={"PYTHONPATH": package})
    spawner = start(SPAWNER, package, spawner=True)
    assert len(spawner.pids) == 3

    before = api.status(catalog, target)
    found = {p.pid: p for p in before.running.processes}  # type: ignore[union-attr]
    assert set(importer.pids + spawner.pids) <= set(found)
    assert not pending(before), "nothing was changed yet"
    assert "PYTHONPATH" in found[importer.proc.pid].via
    assert all(f"child of PID {spawner.proc.pid}" in found[w].via for w in spawner.pids[1:])

    api.apply(catalog, target, ["index-k-bytes"])
    after = pending(api.status(catalog, target))
    for pid in importer.pids + spawner.pids:
        assert after[pid].changed == (f"sglang:{POOL}",)
        assert after[pid].started_at and after[pid].command
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "status", "--python", PY,
                          "--target", roots["sglang"] if kind == "local" else ssh.url(roots["sglang"]),
                          "--root", f"serve={roots['serve']}", "--exit-code", "--running",
                          *(ssh.cli_args() if kind == "remote" else [])])
    assert code == 1, (out, err)
    assert f"restart pending\t{importer.proc.pid}\t" in err
    assert out.startswith("index-k-bytes\tapplied\t")  # stdout keeps one line per fix

    importer.stop()
    spawner.stop()
    again = [start(IMPORTER, env={"PYTHONPATH": package}), start(SPAWNER, package, spawner=True)]
    cleared = api.status(catalog, target)
    assert not pending(cleared)
    assert {p for r in again for p in r.pids} <= {p.pid for p in cleared.running.processes}  # type: ignore[union-attr]

    api.rollback(catalog, target, ["index-k-bytes"])  # a rollback is a change too
    assert {p for r in again for p in r.pids} <= set(pending(api.status(catalog, target)))


def _prefixed(prefix: Path, source: Path) -> list[Path]:
    return sorted((prefix / str(source.parent).lstrip("/")).glob(source.stem + ".*.pyc"))


def test_bytecode_under_a_pycache_prefix_is_found_stale_and_purged(
        tmp_path: Path, start: Start) -> None:
    roots = make_tree(tmp_path / "tree")
    pool = Path(roots["sglang"], POOL)
    prefix = tmp_path / "pycache"
    start(IMPORTER, env={"PYTHONPATH": os.path.join(roots["sglang"], "python"),
                         "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": None})
    [pyc] = _prefixed(prefix, pool)  # the process wrote it there, not beside the source
    assert not (pool.parent / "__pycache__").exists()
    catalog = tmp_path / "catalog"
    _copy_catalog(catalog, purge=False)
    target = LocalTarget(roots, PY, "local")
    # an unchecked hash-based .pyc (as wheels and distro packages compile them) is never
    # checked against the source: after the change it would be served as it is
    py_compile.compile(str(pool), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    api.apply(Catalog(catalog), target, ["index-k-bytes"])
    [stale] = api.status(Catalog(catalog), target).running.stale_pyc  # type: ignore[union-attr]
    assert stale["pyc"] == str(pyc) and stale["source"] == f"sglang:{POOL}"
    assert "unchecked hash-based" in stale["why"]
    code, _out, err = cli(["--catalog", str(catalog), "status", "--target", roots["sglang"],
                           "--python", PY, "--root", f"serve={roots['serve']}", "--exit-code", "--running"])
    assert code == 1 and f"stale .pyc\t{pyc}\tsglang:{POOL}\t" in err

    api.rollback(Catalog(catalog), target, ["index-k-bytes"])
    other = tmp_path / "other-prefix"  # -X pycache_prefix, as a unit file's ExecStart may say
    start(IMPORTER, env={"PYTHONPATH": os.path.join(roots["sglang"], "python"),
                         "PYTHONDONTWRITEBYTECODE": None}, options=("-X", f"pycache_prefix={other}"))
    assert len(_prefixed(other, pool)) == 1
    _copy_catalog(catalog, purge=True)
    py_compile.compile(str(pool), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    api.apply(Catalog(catalog), target, ["index-k-bytes"])
    assert _prefixed(prefix, pool) == _prefixed(other, pool) == []  # the processes' prefixes too
    assert api.status(Catalog(catalog), target).running.stale_pyc == ()  # type: ignore[union-attr]


def _copy_catalog(dest: Path, *, purge: bool) -> None:
    import shutil

    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(SAMPLES / "catalog", dest)
    manifest = dest / "manifests" / "index-k-bytes.toml"
    manifest.write_text(manifest.read_text().replace("purge_pycache = true", f"purge_pycache = {str(purge).lower()}"))


def test_proc_that_cannot_be_read_is_said_never_guessed(tmp_path: Path) -> None:
    from patchkit.engine import procs
    from patchkit.engine.paths import Roots
    from patchkit.engine.records import State

    roots = Roots(make_tree(tmp_path / "tree"))
    seen = procs.running(roots, str(tmp_path), State(), PY, base=str(tmp_path / "no-proc"))
    assert seen["available"] is False and seen["processes"] == []
    assert "cannot read" in seen["detail"] and "not looked at" in seen["detail"]
    assert sys.platform != "linux" or procs.running(roots, str(tmp_path), State(), PY)["available"]


SERVICE = """import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(3600)
"""


@pytest.mark.ssh
def test_the_fleet_status_shows_what_runs_on_each_host(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import http.server
    import json
    import shlex
    import threading

    from tests.test_after_health import _Health

    h1 = fleet.node("h1")
    script, pidfile = tmp_path / "service.py", tmp_path / "service.pid"
    script.write_text(SERVICE)
    start = (f"(cd {shlex.quote(str(h1.sglang))} && setsid {shlex.quote(PY)} {script} {pidfile} "
             f"</dev/null >/dev/null 2>&1 &); while [ ! -s {pidfile} ]; do sleep 0.05; done")
    subprocess.run(["/bin/sh", "-c", start], check=True, timeout=30)
    first = int(pidfile.read_text())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        restart = f"if [ {{{{ inventory_hostname }}}} = h1 ]; then kill {first}; rm -f {pidfile}; {start}; fi"
        run = fleet.run("patchkit", "apply", "dsv4-bf16-sizing", "--inventory", str(fleet.inventory),
                        "--after-cmd", restart, "--health-cmd",
                        f"sglang:http://127.0.0.1:{server.server_address[1]}", "--json")
        assert run.returncode == 0, run.stdout + run.stderr
        again = int(pidfile.read_text())
        assert again != first  # restarted by the after-command
        run = fleet.run("patchkit", "status", "--inventory", str(fleet.inventory), "--json",
                        "--exit-code", "--running")
        assert run.returncode == 0, run.stderr  # converged, and every server runs it
        running = json.loads(run.stdout)["running"]
        assert running["h1"] == "current" and set(running.values()) <= {"current", "none"}
        os.kill(again, signal.SIGKILL)
        subprocess.run(["/bin/sh", "-c", f"rm -f {pidfile}; {start}"], check=True, timeout=30)
        subprocess.run([str(fleet.bin / "patchkit"), "rollback", "dsv4-bf16-sizing", "--target",
                        str(h1.sglang), "--root", f"serve={h1.serve}"], check=True, env=fleet.env,
                       capture_output=True, timeout=120)
        run = fleet.run("patchkit", "status", "--inventory", str(fleet.inventory), "--exit-code", "--running")
        assert f"h1\t(running)\trestart pending: {pidfile.read_text()}\t" in run.stdout, run.stdout
        assert run.returncode == 1, run.stderr
    finally:
        server.shutdown()
        server.server_close()
        if pidfile.exists() and pidfile.read_text():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_server_of_the_venv_given_as_the_target_uses_its_checkout(tmp_path: Path) -> None:
    """``--target VENV`` whose sglang is a checkout outside it (an editable install's ``.pth``,
    as ``pip install -e`` leaves): a Python of that venv, started before an apply from anywhere,
    runs the checkout's code, so it is ``restart pending`` and ``--exit-code --running`` fails.
    Before, it was not seen at all and the gate passed (a new-user trial). A Python of another
    venv is not counted."""
    roots = make_tree(tmp_path / "tree")
    venvs = {}
    for name in ("serving", "other"):
        venvs[name] = tmp_path / name
        subprocess.run([PY, "-m", "venv", "--without-pip", str(venvs[name])], check=True)
        site = next(venvs[name].glob("lib/python*/site-packages"))
        if name == "serving":
            (site / "_sglang_editable.pth").write_text(os.path.join(roots["sglang"], "python") + "\n")
    procs = []
    try:
        for name in ("serving", "other"):
            script = tmp_path / f"{name}.py"
            script.write_text(IMPORTER if name == "serving" else IMPORTER.replace(
                "import sglang.srt.pool\n", ""))
            proc = subprocess.Popen([str(venvs[name] / "bin" / "python"), str(script)], cwd="/",
                                    text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    start_new_session=True)
            procs.append(proc)
            assert proc.stdout.readline() == "ready\n"  # type: ignore[union-attr]
        cat = ["--catalog", str(SAMPLES / "catalog")]
        where = ["--target", str(venvs["serving"]), "--root", f"serve={roots['serve']}"]
        code, out, err = cli([*cat, "apply", "index-k-bytes", *where])
        assert code == 0, (out, err)
        code, out, err = cli([*cat, "status", *where, "--exit-code", "--running"])
        assert code == 1, (out, err)
        assert f"restart pending\t{procs[0].pid}\t" in err, err
        assert str(procs[1].pid) not in err, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # this test's own process group, by its PID
                proc.wait(timeout=30)
            proc.stdout.close()  # type: ignore[union-attr]


def test_a_server_reaching_the_tree_through_a_symlink_is_seen(tmp_path: Path, start: Start) -> None:
    """A deploy layout of ``current -> releases/X``: a server started with
    ``PYTHONPATH=.../current/python``, or naming a file under ``current`` on its command line,
    uses the tree the target names by its real path. Its paths are compared as they resolve
    too, as the root's are: before, neither was seen and ``--exit-code --running`` passed while
    both ran the old code (a new-user trial)."""
    roots = make_tree(tmp_path / "releases" / "r1")
    current = tmp_path / "current"
    current.symlink_to(Path(roots["sglang"]))
    via_path = start(IMPORTER, env={"PYTHONPATH": str(current / "python")})
    via_argv = start(IMPORTER.replace("import sglang.srt.pool\n", ""), str(current / POOL))
    cat = ["--catalog", str(SAMPLES / "catalog")]
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}", "--python", PY]
    code, out, err = cli([*cat, "apply", "index-k-bytes", *where])
    assert code == 0, (out, err)

    code, out, err = cli([*cat, "status", *where, "--exit-code", "--running", "--json"])
    assert code == 1, (out, err)
    found = {p["pid"]: p for p in json.loads(out)["status"]["running"]["processes"]}
    for ran, why in ((via_path, f"PYTHONPATH has {current / 'python'}"),
                     (via_argv, f"command line names {current / POOL}")):
        assert found[ran.proc.pid]["state"] == "restart-pending", found[ran.proc.pid]
        assert why in str(found[ran.proc.pid]["via"]), found[ran.proc.pid]


def test_a_restart_pending_line_is_one_line_whatever_the_command(tmp_path: Path) -> None:
    """A server started with ``python -c`` and a program of several lines: its ``restart
    pending`` line on stderr is still one tab-separated line, each newline a space (it spanned
    several lines: a fleet trial)."""
    roots = make_tree(tmp_path / "tree")
    code = "import sys\nimport sglang.srt.pool\nprint('ready', flush=True)\nsys.stdin.read()\n"
    proc = subprocess.Popen([PY, "-c", code], text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.path.join(roots["sglang"], "python")})
    try:
        assert proc.stdout.readline() == "ready\n"  # type: ignore[union-attr]
        where = ["--catalog", str(SAMPLES / "catalog"), "--target", roots["sglang"], "--root",
                 f"serve={roots['serve']}", "--python", PY]
        assert cli([where[0], where[1], "apply", "index-k-bytes", *where[2:]])[0] == 0
        _, _, err = cli([where[0], where[1], "status", "--running", *where[2:]])
        [line] = [ln for ln in err.splitlines() if ln.startswith(f"restart pending\t{proc.pid}\t")]
        assert "-c 'import sys import sglang.srt.pool print(" in line, err
        assert len(line.split("\t")) == 6, line
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # this test's own process group, by its PID
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]


def test_the_program_text_of_python_c_is_never_taken_for_a_path(tmp_path: Path) -> None:
    """``python -c 'x = "a/b"; ...'`` started in the tree: its program text, which holds a
    slash, was read as a relative path and the process said to be using the tree because
    "command line names TREE/x = "a/b"; ..." (a trial). It uses the tree as a Python in its
    working directory, and is said so."""
    roots = make_tree(tmp_path / "tree")
    code = "x = 'a/b'\nimport sys\nprint('ready', flush=True)\nsys.stdin.read()\n"
    time.sleep(2.0 / os.sysconf("SC_CLK_TCK"))  # started after the tree was made, to the tick
    proc = subprocess.Popen([PY, "-X", "utf8", "-c", code, "--flag"], cwd=roots["sglang"], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"  # type: ignore[union-attr]
        where = ["--catalog", str(SAMPLES / "catalog"), "--target", roots["sglang"], "--root",
                 f"serve={roots['serve']}", "--python", PY]
        assert cli([where[0], where[1], "apply", "index-k-bytes", *where[2:]])[0] == 0
        code_, out, err = cli([where[0], where[1], "status", "--running", "--json", *where[2:]])
        found = {p["pid"]: p for p in json.loads(out)["status"]["running"]["processes"]}
        assert found[proc.pid]["via"] == f"sglang: Python in working directory {roots['sglang']}", \
            found[proc.pid]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # this test's own process group, by its PID
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]


def test_a_process_naming_its_own_descriptor_is_judged_by_what_that_descriptor_is(
        tmp_path: Path) -> None:
    """``bash /dev/fd/3`` (a launcher, ``bash <(...)``) names its own descriptor: resolved in
    patchkit's process it was patchkit's own fd 3, the target's lock, so an unrelated shell
    started in / was ``restart pending`` and the gate failed (a new-user trial). It is looked
    up as that process's: a script outside the tree is not a use of it, one inside is."""
    roots = make_tree(tmp_path / "tree")
    outside, inside = tmp_path / "outside.sh", Path(roots["sglang"]) / "serve-inside.sh"
    for script in (outside, inside):
        script.write_text("echo ready\nread line\n")
    started = []
    try:
        for script in (outside, inside):
            fd = os.open(script, os.O_RDONLY)
            proc = subprocess.Popen(["bash", "/dev/fd/%d" % fd], cwd="/", pass_fds=(fd,), text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
            os.close(fd)
            started.append(proc)
            assert proc.stdout.readline() == "ready\n"  # type: ignore[union-attr]
        where = ["--catalog", str(SAMPLES / "catalog"), "--target", roots["sglang"], "--root",
                 f"serve={roots['serve']}", "--python", PY]
        assert subprocess.run([PY, "-m", "patchkit", where[0], where[1], "apply", "index-k-bytes",
                               *where[2:]], capture_output=True).returncode == 0
        done = subprocess.run([PY, "-m", "patchkit", where[0], where[1], "status", "--running",
                               "--json", *where[2:]], capture_output=True, text=True)
        seen = {p["pid"] for p in json.loads(done.stdout)["status"]["running"]["processes"]}
        assert started[0].pid not in seen and started[1].pid in seen, (seen, done.stderr)
    finally:
        for proc in started:
            os.killpg(proc.pid, signal.SIGKILL)  # this test's own process groups, by their PIDs
            proc.wait(timeout=30)
            proc.stdout.close()  # type: ignore[union-attr]


def wall_from_boot() -> float:
    """The wall clock at boot as this moment has it: it moves only when the wall clock is stepped."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def test_a_file_changed_underneath_after_a_server_started_is_a_restart_pending(
        tmp_path: Path, start: Start) -> None:
    """The server started after patchkit's last change, then the file patchkit wrote changed
    on disk (an edit by hand here; a pip reinstall under an installed package the same): it
    runs what the disk no longer holds, and status said `current`. Such a file counts from
    when it changed: restart pending, naming it; a server started after that is current."""
    roots = make_tree(tmp_path / "tree")
    target = LocalTarget(roots, PY, "local")
    catalog = Catalog(SAMPLES / "catalog")
    api.apply(catalog, target, ["index-k-bytes"])
    package = os.path.join(roots["sglang"], "python")
    server = start(IMPORTER, env={"PYTHONPATH": package})
    assert not pending(api.status(catalog, target)), "started after the apply"
    pool = Path(roots["sglang"]) / POOL
    offset = wall_from_boot()
    pool.write_text(pool.read_text() + "# edited on the host\n")
    seen = api.status(catalog, target)
    assert [s.state for s in seen.status if s.name == "index-k-bytes"] == ["drifted"]
    assert pending(seen)[server.proc.pid].changed == (f"sglang:{POOL}",)
    server.stop()
    later = start(IMPORTER, env={"PYTHONPATH": package})
    after = pending(api.status(catalog, target))
    if abs(wall_from_boot() - offset) > 0.05:
        # the ctime is the wall clock's, a start the boot clock's (docs/state.md): a time sync
        # stepping the wall clock in between shifts the one against the other
        pytest.skip("the wall clock was stepped during the test; the ctime cannot be dated")
    assert later.proc.pid not in after


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True,
                          text=True).stdout


def _took_upstream(releases: Any, cat: Path) -> Catalog:
    """A catalog of one fix, ``took``: SGLang's own 0.5.22 -> 0.5.23 change to the .py file it
    changed least, for 0.5.22, marked upstream since 0.5.23."""
    from patchkit.catalog import edit
    from tests.test_variants import _took

    _took(releases, cat, "0.5.22", "0.5.23")
    assert edit.set_upstream(cat / "manifests" / "took.toml", "0.5.23")
    return Catalog.open(cat)


@pytest.mark.network  # the real releases come from the registry once (the release store after)
def test_a_server_started_before_the_checkout_moved_to_another_release_is_restart_pending(
        three_releases: Any, tmp_path: Path, start: Start) -> None:
    """A server of a 0.5.22 checkout with a fix applied, then the checkout moved to v0.5.23 (a
    stash, a checkout, the stash dropped: thousands of files changed). The fix is in 0.5.23
    upstream, so its file holds what patchkit wrote: status said `not-needed` and called the
    server `current`, and still after `sync` forgot the record (a new-user trial), while it
    runs 0.5.22's code. The move is dated by what tells the release (the version file, git's
    HEAD), not by the records: restart pending; a server started after the move is current."""
    from tests.fixtures.sglang import checkout

    catalog = _took_upstream(three_releases, tmp_path / "cat")
    tree = checkout(three_releases, "0.5.22", tmp_path / "t")
    target = LocalTarget({"sglang": str(tree)}, PY, str(tree))
    assert [f.outcome for f in api.apply(catalog, target, ["took"]).fixes] == ["applied"]
    uses = {"PYTHONPATH": str(tree / "python")}  # SGLang needs torch: the server imports nothing
    server = start(IMPORTER.replace("import sglang.srt.pool\n", ""), env=uses)
    assert not pending(api.status(catalog, target)), "started after the apply"

    _git(tree, "stash", "-q")
    _git(tree, "checkout", "-q", "v0.5.23")
    _git(tree, "stash", "drop", "-q")
    seen = api.status(catalog, target)
    assert [(s.name, s.state) for s in seen.status] == [("took", "not-needed")]
    assert "release" in " ".join(pending(seen)[server.proc.pid].changed)
    where = ["--catalog", str(tmp_path / "cat"), "status", "--target", str(tree), "--python", PY,
             "--exit-code", "--running"]
    code, out, err = cli(where)
    assert code == 1 and f"restart pending\t{server.proc.pid}\t" in err, (out, err)

    [done] = api.sync(catalog, target).fixes  # forgets the record, writing nothing
    assert done.outcome == "not-needed" and "forgotten" in (done.detail or ""), done
    assert server.proc.pid in pending(api.status(catalog, target))
    server.stop()
    later = start(IMPORTER.replace("import sglang.srt.pool\n", ""), env=uses)
    assert later.proc.pid not in pending(api.status(catalog, target))
    assert cli(where)[0] == 0


@pytest.mark.network  # the real wheels come from the registry once (the release store after)
def test_a_server_started_before_pip_installed_its_package_again_is_restart_pending(
        tmp_path: Path, sglang_wheels: Path, sglang_wheel_0523: Path, start: Start) -> None:
    """A server of a venv's installed sglang 0.5.22, then pip upgraded it to 0.5.23 with no fix
    applied: nothing patchkit recorded changed, and the server, running 0.5.22's code, was
    `current`. pip's new ``dist-info/RECORD`` dates the install: restart pending."""
    from patchkit.targets import resolve_target
    from patchkit.upstream import download_wheel
    from tests.test_variants import _pip

    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    _pip(Path(python), download_wheel("0.5.22", sglang_wheels))
    catalog, target = Catalog(SAMPLES / "catalog"), resolve_target(f"python:{python}", [])
    server = start(IMPORTER.replace("import sglang.srt.pool\n", ""), python=python)
    before = api.status(catalog, target)
    assert not pending(before), "started after the install"
    assert server.proc.pid in {p.pid for p in before.running.processes}  # type: ignore[union-attr]

    _pip(Path(python), sglang_wheel_0523)
    changed = pending(api.status(catalog, target))[server.proc.pid].changed
    assert any("sglang-0.5.23.dist-info/RECORD (the package was installed again)" in c
               for c in changed), changed
    server.stop()
    later = start(IMPORTER.replace("import sglang.srt.pool\n", ""), python=python)
    assert later.proc.pid not in pending(api.status(catalog, target))


def test_the_processes_not_read_are_named_by_their_pids() -> None:
    """The line said only a count ("1 process(es) ... were not looked at"), on every status
    in a container whose PID 1 even root cannot read: which ones, up to five (a trial)."""
    from types import SimpleNamespace

    from patchkit.cli.render_status import running_lines
    from patchkit.results import Running

    def line(pids: list[int]) -> str:
        run = Running.from_dict({"available": True, "processes": [], "stale_pyc": [],
                                 "unreadable": [{"pid": p, "command": None} for p in pids]})
        [row] = running_lines(SimpleNamespace(running=run))  # type: ignore[arg-type]
        assert row[0] == "processes not read"
        return row[1]

    assert line([1]).startswith("1 process(es) (pid 1) whose /proc entries")
    assert line([1, 20, 30, 40, 50, 60, 70]).startswith(
        "7 process(es) (pid 1, 20, 30, 40, 50 and 2 more) whose /proc entries")


def test_git_housekeeping_in_the_checkout_is_not_a_server_that_runs_it(tmp_path: Path) -> None:
    """Right after a commit in the target's checkout, git's own housekeeping (`git gc --auto`
    runs `git pack-objects ... .git/objects/pack/.tmp-...-pack`) was listed `restart pending`
    (a trial), failing `status --exit-code --running` for a process that runs no code of the
    tree. A path under the root's `.git` (or patchkit's `.patchkit`) is not the root's code."""
    roots = make_tree(tmp_path / "tree")
    tree = Path(roots["sglang"])
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    (tree / ".git" / "objects" / "pack").mkdir(parents=True, exist_ok=True)
    time.sleep(2.0 / os.sysconf("SC_CLK_TCK"))  # started after the tree was made, to the tick
    proc = subprocess.Popen(["git", "pack-objects", "--local", ".git/objects/pack/.tmp-1-pack"],
                            cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    server = subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()", str(tree / POOL)],
                              stdin=subprocess.PIPE, start_new_session=True)
    try:
        where = ["--catalog", str(SAMPLES / "catalog"), "--target", roots["sglang"], "--root",
                 f"serve={roots['serve']}", "--python", PY]
        assert cli([where[0], where[1], "apply", "index-k-bytes", "--no-git", *where[2:]])[0] == 0
        _code, out, _err = cli([where[0], where[1], "status", "--running", "--json", *where[2:]])
        found = {p["pid"]: p for p in json.loads(out)["status"]["running"]["processes"]}
        assert proc.pid not in found, found[proc.pid]
        assert found[server.pid]["state"] == "restart-pending"  # the control: it is looked at
    finally:
        for p in (proc, server):
            os.killpg(p.pid, signal.SIGKILL)  # this test's own process groups, by their PIDs
            p.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]


def test_the_processes_not_read_are_said_when_asked_not_on_every_status(tmp_path: Path) -> None:
    """A container hides its PID 1 from every user: each plain `status` ended with "processes
    not read 1 process(es) (pid 1) ..." (a trial), noise where nothing was asked about what
    runs. Said with --running or --all; the restarts pending always."""
    from types import SimpleNamespace

    from patchkit.cli.render_status import running_lines
    from patchkit.results import Running

    run = Running.from_dict({"available": True, "processes": [], "stale_pyc": [],
                             "unreadable": [{"pid": 1, "command": None}]})
    result = SimpleNamespace(running=run)
    assert running_lines(result, unread=False) == []  # type: ignore[arg-type]
    assert [r[0] for r in running_lines(result)] == ["processes not read"]  # type: ignore[arg-type]
    tree = make_tree(tmp_path / "tree")["sglang"]
    plain = subprocess.run([PY, "-m", "patchkit", "--catalog", str(SAMPLES / "catalog"), "status",
                            "--target", tree], capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    assert "processes not read" not in plain.stderr, plain.stderr
