"""The seed's three fixes on a fleet of 16 loopback hosts (issue 15): patchkit on Ansible against
one host, a sequential loop of ``patchkit apply --target ssh://``, and an ``ansible.posix.patch``
playbook of the same changes.

Every host is its own sshd on 127.0.0.1 (tests/fixtures/fleet_hosts.py: own port, keys, log)
with its own copy of the demo fork, copied afresh (untimed) before every row. Rows, each
repetition, in this order:

1. ``patchkit apply FIXES --inventory INV16 --forks 16 --json``: every host must end ``applied``;
2. the same on an inventory of one host;
3. a bash loop of ``patchkit apply FIXES --target ssh://USER@127.0.0.1:PORT/PATH --root
   serve=PATH --ssh-option ... --json``, one host after the other;
4. ``ansible-playbook`` of one ``ansible.posix.patch`` task per changed file (``basedir``,
   ``strip: 1``, ``--forks 16``), from the ``ansible`` package in a virtualenv of its own.
   The catalog's revert is no plain patch GNU patch could apply, so the playbook's patches are
   ``git diff`` of a reference copy patchkit applied the fixes to (untimed, once).

SSH connections are counted per host: every host has its own ``ssh``/``sftp``/``scp`` wrappers
that log each start (``--ssh-program`` for the loop; ``ansible_ssh_executable`` and friends for
Ansible) and its own sshd log (connections authenticated). Both Ansible rows run with the test
suite's hermetic Ansible environment (``ansible_env``), with Ansible's default ssh arguments
(``-C -o ControlMaster=auto -o ControlPersist=60s``: a host's tasks share one connection); the
connections a row leaves open are closed, untimed, before the next.
Only the working tree ("after") is measured: a ``--before`` revision may predate the fleet.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from common import NEUTRAL, REPO, Sample, Version, cli, fmt, measure, say
from seed import FIXES, Fork, copy_fork, make_fork

sys.path.insert(0, str(REPO))  # the repository's tests/
from tests.fixtures.fleet_hosts import (Fleet, FleetHost, ansible_env, running_fleet,  # noqa: E402
                                        write_inventory)
from tests.fixtures.sshd_server import SshdMissing  # noqa: E402

SECTION = "## Fleet: the seed's three fixes on 16 loopback hosts"
HOSTS = 16
GOAL_ONE_HOST = 3.0  # 16 hosts in at most this many times one host's wall time
GOAL_LOOP = 4.0  # and at least this many times faster than the sequential loop
ROOTS = ("sglang", "serve")
ROWS = ("fleet16", "fleet1", "loop", "posix")


@dataclass(frozen=True)
class Run:
    sample: Sample
    clients: dict[str, int]  # host -> ssh/sftp/scp programs started (its wrappers' log)
    accepted: dict[str, int]  # host -> connections its sshd authenticated (its log)
    ok: bool  # every host ended as it should (applied; the playbook: no task failed)
    detail: str  # why not, when not ok
    trees: dict[str, str]  # host -> digest of its touched files' bytes and its git status
    cpu: float  # CPU seconds the whole machine spent during the row (every process, every host)


@dataclass(frozen=True)
class Reference:
    """What patchkit's engine left on a pristine copy: the touched files, their bytes, the git
    status of each root, and the per-file patches the playbook applies."""

    files: tuple[tuple[str, str], ...]  # (root, path)
    digest: str
    patches: tuple[tuple[str, str, Path], ...]  # (root, path, patch file)


class Hosts:
    """The fleet's hosts, each with its fixed copy location, counting wrappers and inventory
    entry; :meth:`fresh` recopies the pristine fork to the hosts of a row."""

    def __init__(self, fleet: Fleet, fork: Fork, workdir: Path, python: str) -> None:
        self.fleet, self.fork, self.workdir, self.python = fleet, fork, workdir, python
        self.names = fleet.names
        # first: git status may rewrite the fork's index
        self._status = {"sglang": _status(fork.sglang), "serve": _status(fork.serve)}
        self._index: dict[str, dict[Path, bytes]] = {}  # host -> its roots' git index, pristine
        self._files: dict[str, tuple[int, int, int]] = {}  # the fork's files: size, mtime, mode
        self._dirs: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(fork.workdir):
            rel_dir = os.path.relpath(dirpath, fork.workdir)
            self._dirs.update(os.path.normpath(os.path.join(rel_dir, d)) for d in dirnames)
            for f in filenames:
                st = os.lstat(os.path.join(dirpath, f))
                self._files[os.path.normpath(os.path.join(rel_dir, f))] = (
                    st.st_size, st.st_mtime_ns, st.st_mode)
        for name in self.names:
            wrap = self.wrap_dir(name)
            wrap.mkdir(parents=True)
            for program in ("ssh", "sftp", "scp"):
                real = shutil.which(program)
                if real is None:
                    raise SystemExit(f"the fleet benchmark needs {program} (Debian: openssh-client)")
                path = wrap / program
                path.write_text(f'#!/bin/sh\necho {program} >> "{wrap / "log"}"\n'
                                f'exec {shlex.quote(real)} "$@"\n')
                path.chmod(0o755)

    def wrap_dir(self, name: str) -> Path:
        return self.workdir / "wrap" / name

    def copy(self, name: str) -> Fork:
        base = self.workdir / "hosts" / name
        return Fork(base, base / self.fork.sglang.relative_to(self.fork.workdir),
                    base / self.fork.serve.relative_to(self.fork.workdir), self.fork.release,
                    self.fork.dead, self.fork.later)

    def host(self, name: str) -> FleetHost:
        return self.fleet.host(name)

    def fresh(self, names: list[str]) -> None:
        """Pristine copies of the fork for ``names``, untimed. Each host's copy is made once
        (``cp -a``, git indexes refreshed as a long-deployed tree's are); before every later row
        it is put back to the pristine state (:meth:`_restore`), which rewrites only what the
        previous row changed: 16 fresh ``cp -a`` of the fork per row would take minutes on a
        busy disk. Either way each root's ``git status`` must then be the pristine fork's, and
        everything is flushed to disk."""
        todo = [n for n in names if n not in self._index]
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(self._first_copy, todo))
        for name in names:
            if name not in todo:
                self._restore(name)
            copy = self.copy(name)
            for root, pristine in ((copy.sglang, self._status["sglang"]),
                                   (copy.serve, self._status["serve"])):
                if _status(root) != pristine:
                    raise SystemExit(f"{root} is not pristine after its restore:\n{_status(root)}")
        os.sync()

    def _first_copy(self, name: str) -> None:
        dest = self.copy(name)
        dest.workdir.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(self.fork.workdir), str(dest.workdir)], check=True)
        for root in (dest.sglang, dest.serve):
            subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=root, check=True)
        self._index[name] = {root: (root / ".git" / "index").read_bytes()
                             for root in (dest.sglang, dest.serve)}

    def _restore(self, name: str) -> None:
        """Every file of the host's copy whose size or mtime differs from the pristine fork's
        copied back (``copy2``), every file and directory the fork does not have removed, the
        git indexes put back as they were after the first copy, then refreshed (only the files
        copied back are rehashed)."""
        dest = self.copy(name).workdir
        seen = set()
        for dirpath, dirnames, filenames in os.walk(dest):
            rel_dir = os.path.relpath(dirpath, dest)
            for d in list(dirnames):
                rel = os.path.normpath(os.path.join(rel_dir, d))
                if rel not in self._dirs:
                    shutil.rmtree(os.path.join(dirpath, d))
                    dirnames.remove(d)
            for f in filenames:
                rel = os.path.normpath(os.path.join(rel_dir, f))
                path = os.path.join(dirpath, f)
                seen.add(rel)
                want = self._files.get(rel)
                st = os.lstat(path)
                if want is None:
                    os.unlink(path)
                elif (st.st_size, st.st_mtime_ns, st.st_mode) != want:
                    os.unlink(path)
                    shutil.copy2(self.fork.workdir / rel, path, follow_symlinks=False)
        for rel in self._files.keys() - seen:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.fork.workdir / rel, dest / rel, follow_symlinks=False)
        for root, index in self._index[name].items():
            (root / ".git" / "index").write_bytes(index)
            subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=root, check=True)

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        clients = {}
        for name in self.names:
            log = self.wrap_dir(name) / "log"
            clients[name] = len(log.read_text().split()) if log.exists() else 0
        return clients, {name: self.fleet.server(name).accepted() for name in self.names}

    def inventory(self, path: Path, names: list[str]) -> Path:
        host_vars = {}
        for name in names:
            copy, wrap = self.copy(name), self.wrap_dir(name)
            host_vars[name] = {"patchkit_target": str(copy.sglang),
                               "patchkit_roots": {"serve": str(copy.serve)},
                               "ansible_ssh_executable": str(wrap / "ssh"),
                               "ansible_sftp_executable": str(wrap / "sftp"),
                               "ansible_scp_executable": str(wrap / "scp")}
        return write_inventory(path, [self.host(n) for n in names], host_vars, python=self.python)

    def ssh_options(self, name: str) -> list[str]:
        """``--ssh-option`` settings of the loop: the inventory's (tests/fixtures/fleet_hosts.py
        ssh_common_args and the key); it opens one connection per host, so it shares none."""
        host = self.host(name)
        return [f"UserKnownHostsFile={host.known_hosts}", "GlobalKnownHostsFile=/dev/null",
                "StrictHostKeyChecking=yes", f"IdentityFile={host.identity}", "IdentitiesOnly=yes",
                "IdentityAgent=none", "BatchMode=yes", "ControlMaster=no", "ControlPath=none"]


def _status(root: Path) -> bytes:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--ignored"],
                          cwd=root, check=True, capture_output=True).stdout


def _touched(roots: dict[str, Path]) -> list[tuple[str, str]]:
    files = []
    for root, path in roots.items():
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=path,
                             check=True, capture_output=True, text=True).stdout
        files += [(root, line[3:]) for line in out.splitlines()]
    return sorted(files)


def tree_digest(copy: Fork, files: tuple[tuple[str, str], ...]) -> str:
    """The touched files' bytes and each root's ``git status --porcelain`` (any other file
    changed or left behind, a ``.orig`` or ``.rej`` included, shows there)."""
    roots = {"sglang": copy.sglang, "serve": copy.serve}
    h = hashlib.sha256()
    for root, path in files:
        target = roots[root] / path
        h.update(f"{root}:{path}\0".encode())
        h.update(target.read_bytes() if target.is_file() else b"<missing>")
    for root, path in roots.items():
        h.update(subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=path,
                                check=True, capture_output=True).stdout)
    return h.hexdigest()


def make_reference(after: Version, hosts: Hosts, workdir: Path) -> Reference:
    """patchkit applies the fixes to one pristine copy (untimed); its touched files, their
    bytes, and ``git diff`` of each, the playbook's patches."""
    ref = copy_fork(hosts.fork, workdir / "reference")
    cli(after, "apply", *FIXES, "--target", str(ref.sglang), "--root", f"serve={ref.serve}", "--json")
    roots = {"sglang": ref.sglang, "serve": ref.serve}
    files = tuple(_touched(roots))
    patches = []
    out = workdir / "posix-patches"
    out.mkdir()
    for i, (root, path) in enumerate(files, 1):
        diff = subprocess.run(["git", "diff", "--no-color", "--no-ext-diff", "--", path],
                              cwd=roots[root], check=True, capture_output=True).stdout
        if not diff:
            raise SystemExit(f"patchkit left {root}:{path} changed but git diff shows nothing "
                             "(an untracked file?): the playbook's patches cannot be derived")
        patch = out / f"{i:02d}-{Path(path).name}.patch"
        patch.write_bytes(diff)
        patches.append((root, path, patch))
    digest = tree_digest(ref, files)
    shutil.rmtree(ref.workdir)
    return Reference(files, digest, tuple(patches))


def posix_playbook(path: Path, ref: Reference) -> Path:
    tasks = [{"name": f"patch {root}:{file}",
              "ansible.posix.patch": {"src": str(patch), "strip": 1,
                                      "basedir": ("{{ patchkit_target }}" if root == "sglang"
                                                  else "{{ patchkit_roots.serve }}")}}
             for root, file, patch in ref.patches]
    path.write_text(json.dumps([{"name": "the seed's three fixes, as GNU patches", "hosts": "all",
                                 "gather_facts": False, "tasks": tasks}], indent=1))
    return path


def ansible_venv(home: Path) -> tuple[Path, str]:
    """A virtualenv with the ``ansible`` package (ansible-core plus the bundled collections,
    ansible.posix among them), made once per work directory; its bin and versions."""
    bin_dir = home / "bin"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not (bin_dir / "ansible-playbook").exists():
        shutil.rmtree(home, ignore_errors=True)
        say(f"installing the ansible package (ansible.posix bundled) into {home}")
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "ansible"], check=True, env=env)
    versions = subprocess.run(
        [str(bin_dir / "python"), "-c",
         "import importlib.metadata as m, json, pathlib, ansible_collections.ansible.posix as p;"
         "print(m.version('ansible'), m.version('ansible-core'),"
         "json.loads((pathlib.Path(p.__path__[0]) / 'MANIFEST.json').read_text())"
         "['collection_info']['version'])"],
        check=True, capture_output=True, text=True, env=env, cwd=NEUTRAL).stdout.split()
    return bin_dir, (f"`ansible` {versions[0]} (ansible-core {versions[1]}, ansible.posix "
                     f"{versions[2]})")


def has_fleet(version: Version) -> bool:
    """Whether ``version`` can drive a fleet: ``patchkit plan --collections-path`` works and
    ansible-playbook is installed beside it (the ``fleet`` extra)."""
    proc = subprocess.run([version.patchkit, "plan", "--collections-path"], cwd=NEUTRAL,
                          capture_output=True, text=True)
    return (proc.returncode == 0 and Path(proc.stdout.strip()).is_dir()
            and (version.venv / "bin" / "ansible-playbook").exists())


def ansible_core(version: Version) -> str:
    return subprocess.run([version.python, "-c", "import importlib.metadata as m; "
                           "print(m.version('ansible-core'))"], check=True, capture_output=True,
                          text=True, cwd=NEUTRAL).stdout.strip()


def clean_env(env: dict[str, str]) -> list[str]:
    """``env -u`` for every ANSIBLE_* of the user's that ``env`` does not set."""
    return ["env", *(f"-u{k}" for k in os.environ if k.startswith("ANSIBLE_") and k not in env)]


def run_row(hosts: Hosts, names: list[str], argv: list[str], env: dict[str, str],
            judge: Callable[[Sample], tuple[bool, str]], ref: Reference) -> Run:
    hosts.fresh(names)
    before = hosts.counts()
    busy = machine_cpu()
    sample = measure(argv, NEUTRAL, env, ok=(0, 2, 4, 16))
    cpu = machine_cpu() - busy
    after = hosts.counts()
    close_masters(env)
    ok, detail = judge(sample)
    trees = {n: tree_digest(hosts.copy(n), ref.files) for n in names}
    clients = {n: after[0][n] - before[0][n] for n in names}
    accepted = {n: after[1][n] - before[1][n] for n in names}
    return Run(sample, clients, accepted, ok, detail, trees, cpu)


def machine_cpu() -> float:
    """CPU seconds every core of the machine has spent busy since boot (/proc/stat): the
    controller, every host's sshd, shell and Python, and anything else running."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def close_masters(env: dict[str, str]) -> None:
    """End the ssh connections Ansible's ControlPersist keeps open after a row (untimed), so
    every row starts with none: ``ssh -O exit`` on each control socket it left."""
    directory = env.get("ANSIBLE_SSH_CONTROL_PATH_DIR")
    if not directory:
        return
    for socket in Path(directory).iterdir():
        subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "patchkit-bench"],
                       capture_output=True)


def judge_fleet(names: list[str]) -> Callable[[Sample], tuple[bool, str]]:
    def judge(sample: Sample) -> tuple[bool, str]:
        report = json.loads(sample.stdout)
        states = {h["host"]: h["state"] for h in report["hosts"]}
        bad = {h: s for h, s in states.items() if s != "applied"}
        if set(states) != set(names) or bad:
            return False, f"hosts not applied: {bad or sorted(set(names) - set(states))}"
        return True, ""
    return judge


def judge_loop(out: Path, names: list[str]) -> Callable[[Sample], tuple[bool, str]]:
    def judge(sample: Sample) -> tuple[bool, str]:
        bad = {}
        for name in names:
            result = json.loads((out / f"{name}.json").read_text())
            outcomes = {f["name"]: f["outcome"] for f in result["fixes"]}
            if not result.get("ok", True) or set(outcomes.values()) != {"applied"}:
                bad[name] = outcomes
        return (not bad), (f"hosts not applied: {bad}" if bad else "")
    return judge


def judge_posix(sample: Sample) -> tuple[bool, str]:
    recap = sample.stdout[sample.stdout.rfind("PLAY RECAP"):]
    failed = [line.split()[0] for line in recap.splitlines()[1:]
              if line.strip() and ("failed=0" not in line or "unreachable=0" not in line)]
    return (not failed), (f"failed or unreachable: {failed}" if failed else "")


def loop_script(after: Version, hosts: Hosts, names: list[str], out: Path) -> str:
    lines = ["set -e"]
    for name in names:
        host, copy = hosts.host(name), hosts.copy(name)
        argv = [after.patchkit, "apply", *FIXES,
                "--target", f"ssh://{host.user}@127.0.0.1:{host.port}{copy.sglang}",
                "--root", f"serve={copy.serve}", "--python", hosts.python,
                *(arg for opt in hosts.ssh_options(name) for arg in ("--ssh-option", opt)),
                "--ssh-program", str(hosts.wrap_dir(name) / "ssh"), "--json"]
        lines.append(" ".join(shlex.quote(a) for a in argv) + f" > {shlex.quote(str(out / name))}.json")
    return "\n".join(lines) + "\n"


def profile(after: Version, hosts: Hosts, inventory: Path, env: dict[str, str],
            workdir: Path) -> list[tuple[str, float]]:
    """One more 16-host run, phase by phase (the timestamps of patchkit's progress lines on
    stderr), and its parts measured alone, for scale."""
    names = hosts.names
    hosts.fresh(names)
    argv = [*clean_env(env), after.patchkit, "apply", *FIXES, "--inventory", str(inventory),
            "--forks", str(HOSTS)]
    stamps = []
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=NEUTRAL, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        stamps.append((time.perf_counter() - start, line.strip()))
    proc.wait()
    total = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the profiled run failed ({proc.returncode}): {stamps}")
    at = {line.split(":")[0].split(" ")[0]: t for t, line in stamps}
    phases = [("patchkit start-up, catalog and `ansible-inventory --list` (until the preflight "
               "starts)", at["preflight"]),
              ("preflight: one `ansible-playbook`, the engine's dry run on every host (check mode)",
               at["wave"] - at["preflight"]),
              ("the wave: one `ansible-playbook`, the engine's apply on every host, and the report",
               total - at["wave"]),
              ("whole run", total)]

    def timed(label: str, cmd: list[str], cmd_env: dict[str, str] | None = None) -> None:
        phases.append((label, measure([*clean_env(cmd_env or {}), *cmd], NEUTRAL, cmd_env).seconds))

    hosts.fresh(names[:1])
    one = hosts.copy(names[0])
    server = hosts.fleet.server(names[0])
    timed("for scale: one `ssh host true` (a connection: key exchange, login, the user's shell "
          "and its rc files on the host)",
          ["ssh", *server.ssh_options(), "-o", "ControlMaster=no", "-p", str(server.port),
           f"{server.user}@{server.host}", "true"])
    timed("for scale: `patchkit --version`", [after.patchkit, "--version"], after.env)
    timed("for scale: `patchkit plan FIXES --json` (the request the controller renders)",
          [after.patchkit, "plan", *FIXES, "--json"], after.env)
    timed("for scale: `ansible-inventory --list` of the 16 hosts",
          [str(after.venv / "bin" / "ansible-inventory"), "-i", str(inventory), "--list"], env)
    empty = workdir / "empty.json"
    empty.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": []}]))
    timed("for scale: `ansible-playbook` of a play with no task on the 16 hosts (start-up, "
          "inventory; no connection)",
          [str(after.venv / "bin" / "ansible-playbook"), "-i", str(inventory), str(empty)], env)
    ping = workdir / "ping.json"
    ping.write_text(json.dumps([{"hosts": "all", "gather_facts": False,
                                 "tasks": [{"ansible.builtin.ping": {}}]}]))
    timed("for scale: `ansible-playbook` of one `ansible.builtin.ping` task on the 16 hosts, "
          "`--forks 16` (a task's connection and a small module per host)",
          [str(after.venv / "bin" / "ansible-playbook"), "-i", str(inventory), "--forks",
           str(HOSTS), str(ping)], env)
    raw = workdir / "raw.json"
    raw.write_text(json.dumps([{"hosts": "all", "gather_facts": False,
                                "tasks": [{"ansible.builtin.raw": f"{shlex.quote(hosts.python)} -c pass"}]}]))
    timed("for scale: `ansible-playbook` of one `ansible.builtin.raw` task running `python -c pass` "
          "on the 16 hosts, `--forks 16` (a task's connection and a Python per host, no module: "
          "what the engine's task costs before the engine runs)",
          [str(after.venv / "bin" / "ansible-playbook"), "-i", str(inventory), "--forks",
           str(HOSTS), str(raw)], env)
    timed("for scale: `patchkit apply FIXES --target` one local copy (the engine and the "
          "CLI, no SSH, no Ansible)",
          [after.patchkit, "apply", *FIXES, "--target", str(one.sglang), "--root",
           f"serve={one.serve}", "--json"], after.env)
    return phases


def run(versions: list[Version], repeat: int, quick: bool, workdir: Path):
    """Measure; returns (the section, the summary rows)."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    after = versions[-1]
    if not has_fleet(after):
        raise SystemExit(f"patchkit from {after.source} has no fleet (`patchkit plan "
                         "--collections-path` fails or no ansible-playbook beside it): bench/all.py "
                         "installs it with its fleet extra")
    core = ansible_core(after)
    ansible_bin, ansible_package = ansible_venv(workdir.parent / "venv-ansible")
    fork = make_fork(after, workdir)
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    # hermetic, with Ansible's own default connection sharing (ControlPersist=60s)
    env = ansible_env(workdir, control_persist=60)
    runs: dict[str, list[Run]] = {row: [] for row in ROWS}
    with ExitStack() as stack:
        try:
            fleet = stack.enter_context(running_fleet(workdir / "sshd", HOSTS))
        except SshdMissing as exc:
            raise SystemExit(f"the benchmark needs {exc}") from None
        hosts = Hosts(fleet, fork, workdir, python)
        names = hosts.names
        ref = make_reference(after, hosts, workdir)
        inv16 = hosts.inventory(workdir / "inventory-16.yml", names)
        inv1 = hosts.inventory(workdir / "inventory-1.yml", names[:1])
        playbook = posix_playbook(workdir / "posix-patch.json", ref)
        out = workdir / "loop-out"
        out.mkdir()
        script = workdir / "loop.sh"
        script.write_text(loop_script(after, hosts, names, out))
        fleet_argv = [after.patchkit, "apply", *FIXES, "--forks", str(HOSTS), "--json", "--inventory"]
        rows = {
            "fleet16": lambda: run_row(hosts, names, [*clean_env(env), *fleet_argv, str(inv16)],
                                       {**after.env, **env}, judge_fleet(names), ref),
            "fleet1": lambda: run_row(hosts, names[:1], [*clean_env(env), *fleet_argv, str(inv1)],
                                      {**after.env, **env}, judge_fleet(names[:1]), ref),
            "loop": lambda: run_row(hosts, names, ["bash", str(script)], after.env,
                                    judge_loop(out, names), ref),
            "posix": lambda: run_row(hosts, names,
                                     [*clean_env(env), str(ansible_bin / "ansible-playbook"), "-i",
                                      str(inv16), "--forks", str(HOSTS), str(playbook)],
                                     env, judge_posix, ref),
        }
        for i in range(repeat):
            for row in ROWS:
                runs[row].append(rows[row]())
                last = runs[row][-1]
                say(f"fleet #{i + 1} {row}: {fmt(last.sample.seconds)}"
                    + ("" if last.ok else f" NOT OK: {last.detail}"))
        phases = profile(after, hosts, inv16, {**after.env, **env}, workdir)
        subprocess.run(["rm", "-rf", str(workdir / "hosts")], check=True)
    return report(after, fork, core, ansible_package, python, ref, runs, phases, repeat)


def _per_host(values: list[dict[str, int]]) -> str:
    """``2`` when every host of every run shows 2, else the range."""
    seen = sorted({v for run in values for v in run.values()})
    return str(seen[0]) if len(seen) == 1 else f"{seen[0]}-{seen[-1]}"


def report(after: Version, fork: Fork, core: str, ansible_package: str, python: str,
           ref: Reference, runs: dict[str, list[Run]], phases: list[tuple[str, float]],
           repeat: int):
    med = {row: statistics.median(r.sample.seconds for r in runs[row]) for row in ROWS}
    low = {row: min(r.sample.seconds for r in runs[row]) for row in ROWS}
    one_ratio = med["fleet16"] / med["fleet1"]
    loop_ratio = med["loop"] / med["fleet16"]
    posix_ratio = med["posix"] / med["fleet16"]
    goal_one = one_ratio <= GOAL_ONE_HOST
    goal_loop = loop_ratio >= GOAL_LOOP

    def ok(row: str) -> str:
        bad = [r.detail for r in runs[row] if not r.ok]
        return "yes, every run" if not bad else f"NO: {bad[0]}"

    def same(row: str) -> str:
        trees = {d for r in runs[row] for d in r.trees.values()}
        return "identical to patchkit's reference" if trees == {ref.digest} else "DIFFERENT"

    labels = {
        "fleet16": f"patchkit on Ansible: `apply --inventory` (16 hosts) `--forks {HOSTS}`",
        "fleet1": f"patchkit on Ansible: `apply --inventory` (1 host) `--forks {HOSTS}`",
        "loop": "sequential bash loop: `patchkit apply --target ssh://...` per host (16 hosts)",
        "posix": f"`ansible-playbook` of {len(ref.patches)} `ansible.posix.patch` tasks (16 hosts) "
                 f"`--forks {HOSTS}`",
    }
    goals = {
        "fleet16": (f"16 hosts / 1 host = {one_ratio:.2f}x (goal <= {GOAL_ONE_HOST:.0f}x: "
                    f"{'met' if goal_one else 'missed'}); loop / fleet = {loop_ratio:.2f}x (goal >= "
                    f"{GOAL_LOOP:.0f}x: {'met' if goal_loop else 'missed'})"),
        "fleet1": "the one-host baseline",
        "loop": f"{loop_ratio:.2f}x the fleet's median",
        "posix": f"{posix_ratio:.2f}x the fleet's median",
    }
    cpu = {row: statistics.median(r.cpu for r in runs[row]) for row in ROWS}
    cores = os.cpu_count() or 1
    rows = [f"| {labels[row]} | {fmt(med[row])} | {fmt(low[row])} | {fmt(cpu[row])} | "
            f"{_per_host([r.clients for r in runs[row]])} / {_per_host([r.accepted for r in runs[row]])} | "
            f"{ok(row)} | {same(row)} | {goals[row]} |" for row in ROWS]
    prof = [f"| {label} | {fmt(seconds)} |" for label, seconds in phases]
    files = ", ".join(f"`{root}:{path}`" for root, path in ref.files)
    section = "\n".join([
        SECTION, "",
        f"Issue 15's benchmark: the seed's three fixes (`{' '.join(FIXES)}`) on {HOSTS} hosts, each "
        f"its own OpenSSH server on 127.0.0.1 (its own port, keys and log) with its own copy of the "
        f"demo fork (SGLang {fork.release}, built by `patchkit demo`, the deploy undone), made "
        "once per host with `cp -a` and put back to pristine before every row (every file whose "
        "size or mtime differs from the fork's copied back, every other file removed, the git "
        "indexes restored; then both roots' `git status` checked to be the fork's), flushed to "
        "disk, untimed: 16 fresh copies per row took minutes on the shared disk. N = "
        f"{repeat}, the rows interleaved in the order of the table. Only the working tree is measured, installed with its `fleet` "
        f"extra (ansible-core {core}): the fleet rows have no before. The playbook row runs "
        f"{ansible_package}, in a virtualenv of its own. Every host runs its checks, Ansible's "
        f"modules and the loop's agent with the interpreter of the Python that runs the "
        f"benchmark ({platform.python_version()}).", "",
        "Both Ansible rows run with the same hermetic environment (the test suite's `ansible_env`: "
        "no `ansible.cfg`, pipelining on, and Ansible's default ssh arguments, `-C -o "
        "ControlMaster=auto -o ControlPersist=60s`, so a host's tasks share one connection; the "
        "connections a row leaves open are closed, untimed, before the next row) and the same "
        "inventory (`-F none`, the host's key and known_hosts). The loop passes the same ssh "
        "settings with `--ssh-option` and opens one connection per host. Connections per host: "
        "ssh, sftp and scp clients started, a multiplexed session included (each host has "
        "counting wrappers: `--ssh-program` for the loop, `ansible_ssh_executable`, "
        "`ansible_sftp_executable` and `ansible_scp_executable` for Ansible) / connections that "
        "host's sshd authenticated (its log).", "",
        "| approach | wall time, median | min | CPU time, whole machine (median) | connections per "
        "host (client / server) | every host done | result trees | goal |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        f"CPU time is what every core of the machine spent during the row ({cores} cores here, "
        "from `/proc/stat`): the controller and all 16 hosts' sshd, shells and Pythons share "
        f"them, so a row cannot take less wall time than its CPU time / {cores}. The loop used "
        f"{fmt(cpu['loop'])} of CPU; for the fleet to be {GOAL_LOOP:.0f}x faster "
        f"({fmt(med['loop'] / GOAL_LOOP)}) it would have to do all its work in at most "
        f"{fmt(med['loop'] / GOAL_LOOP * cores)} of CPU, where it used {fmt(cpu['fleet16'])} "
        f"({cpu['fleet16'] / HOSTS * 1000:.0f} ms per host for its two tasks, preflight and wave, "
        f"against the loop's {cpu['loop'] / HOSTS * 1000:.0f} ms per host for one).", "",
        f"Goals (issue 15): 16 hosts in at most {GOAL_ONE_HOST:.0f}x one host's wall time: "
        f"**{'met' if goal_one else 'missed'}** ({one_ratio:.2f}x); at least {GOAL_LOOP:.0f}x faster "
        f"than the sequential loop: **{'met' if goal_loop else 'missed'}** ({loop_ratio:.2f}x).", "",
        f"Result trees: the touched files' bytes ({files}) and `git status --porcelain` of both "
        "roots on every host, compared with a reference copy patchkit applied the fixes to. The "
        "playbook's patches are not the catalog's: the revert (`revert-hicache-index-k-sync`) is "
        "a three-way revert of a commit, not a plain patch GNU patch could apply, so the playbook "
        f"applies `git diff` of each file of that reference ({len(ref.patches)} per-file patches, "
        "one task each, `strip: 1`, `basedir` the host's root). It checks nothing beyond GNU "
        "patch's own dry run: no release check, no verification, no rollback of a host's earlier "
        "tasks when a later one fails, no record on the host.", "",
        "Where the 16-host run's time goes (one more run, timed from patchkit's progress lines; "
        "the other rows measure its parts alone; each row is one run, so on a busy machine a "
        "difference of a few seconds between them is noise):", "",
        "| phase | wall time |", "|---|---|", *prof, ""])
    summary = [
        (f"fleet: 3 fixes on {HOSTS} hosts, patchkit on Ansible `--forks {HOSTS}`",
         {after.label: [r.sample for r in runs["fleet16"]]}, None, None,
         f"{one_ratio:.2f}x one host (goal <= {GOAL_ONE_HOST:.0f}x: {'met' if goal_one else 'missed'}); "
         f"loop {loop_ratio:.2f}x slower (goal >= {GOAL_LOOP:.0f}x: {'met' if goal_loop else 'missed'}); "
         "working tree only"),
        ("fleet: the same, 1 host", {after.label: [r.sample for r in runs["fleet1"]]}, None, None,
         "working tree only"),
        (f"fleet: sequential `--target ssh://` loop, {HOSTS} hosts",
         {after.label: [r.sample for r in runs["loop"]]}, None, None, "working tree only"),
        (f"fleet: `ansible.posix.patch` playbook, {HOSTS} hosts `--forks {HOSTS}`",
         {after.label: [r.sample for r in runs["posix"]]}, None, None,
         "not patchkit: the `ansible` package; working tree run only"),
    ]
    return section, summary
