"""Running Ansible for the fleet commands: the hosts of an inventory, one rendered playbook per
step, and each host's task results read back from the collection's callback (docs/fleet.md)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AnsibleFailed, Stop, Terminated, UsageError, reap, stopping_on_signals

#: Put on ANSIBLE_COLLECTIONS_PATH: it holds ``ansible_collections/patchkit/fleet``.
COLLECTIONS_PATH = Path(__file__).resolve().parent / "collection"
ENGINE_MODULE = "patchkit.fleet.engine"
_INSTALL = ("install the fleet extra where patchkit runs: pip install '.[fleet]' from a clone of "
            "patchkit (distribution patchkit-sglang)")


def ansible_tool(name: str) -> str:
    """The Ansible command ``name``: the one beside this Python (the venv patchkit runs in),
    else the first on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise UsageError(f"{name} not found: the fleet commands run Ansible; {_INSTALL}", tool=name)
    return found


@dataclass(frozen=True)
class Host:
    """One inventory host and the roots its variables give (values may be Jinja templates,
    rendered on the host's turn by the module's action plugin)."""

    name: str
    roots: Mapping[str, str]
    python: str | None = None


def inventory_hosts(inventory: str, limit: str | None = None) -> list[Host]:
    """The hosts of ``inventory`` (after ``limit``), in inventory order, with their roots."""
    argv = [ansible_tool("ansible-inventory"), "-i", inventory, "--list"]
    if limit:
        argv += ["--limit", limit]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ansible_env())
    if proc.returncode != 0:
        raise AnsibleFailed(f"cannot read the inventory {inventory}: {_tail(proc.stderr)}. Check "
                            "the file with ansible-inventory --list", inventory=inventory)
    if "Unable to parse" in proc.stderr or "No inventory was parsed" in proc.stderr:
        raise UsageError(f"cannot read the inventory {inventory}: {_tail(proc.stderr)}. Give an "
                         "Ansible inventory file or directory", inventory=inventory)
    data = json.loads(proc.stdout or "{}")
    hostvars = (data.get("_meta") or {}).get("hostvars") or {}
    names: dict[str, None] = {}

    def walk(group: str, seen: set[str]) -> None:
        if group in seen:
            return
        seen.add(group)
        entry = data.get(group) or {}
        names.update(dict.fromkeys(entry.get("hosts") or ()))
        for child in entry.get("children") or ():
            walk(child, seen)

    walk("all", set())
    if not names:
        where = f" matching --limit {limit!r}" if limit else ""
        raise UsageError(f"the inventory {inventory} has no hosts{where}", inventory=inventory)
    return [_host(name, hostvars.get(name) or {}, inventory) for name in names]


def _host(name: str, hostvars: Mapping[str, Any], inventory: str) -> Host:
    target, extra = hostvars.get("patchkit_target"), hostvars.get("patchkit_roots") or {}
    if not isinstance(extra, Mapping):
        raise UsageError(f"host {name} in {inventory}: patchkit_roots must be a mapping of root "
                         f"names to paths, not {extra!r}", host=name)
    roots = {str(k): str(v) for k, v in extra.items()}
    if target:
        roots["sglang"] = str(target)
    if "sglang" not in roots:
        raise UsageError(f"host {name} in {inventory} has no patchkit_target: set it to the "
                         "host's SGLang tree (an inventory variable)", host=name)
    for root, path in roots.items():  # a template ({{ ... }}) is the host's to expand
        if not path.startswith("/") and "{{" not in path:
            var = "patchkit_target" if root == "sglang" and target else f"patchkit_roots.{root}"
            if path.startswith("python:"):  # the one-host form: a fleet names both parts
                raise UsageError(
                    f"host {name} in {inventory}: {var} is {path!r}, an interpreter: a fleet "
                    "takes the site-packages directory holding sglang as patchkit_target "
                    "(e.g. /opt/venv/lib/python3.11/site-packages) and the interpreter as "
                    "patchkit_python (docs/fleet.md)", host=name, root=root)
            raise UsageError(f"host {name} in {inventory}: {var} is {path!r}, not an absolute "
                             "path: give the directory on the host from / (the engine runs "
                             "there, not in this directory)", host=name, root=root)
    python = hostvars.get("patchkit_python")
    return Host(name=name, roots=roots, python=str(python) if python else None)


def engine_task(workdir: Path, request: Mapping[str, Any], name: str, txn: str | None = None,
                **extra: Any) -> dict[str, Any]:
    """A ``patchkit.fleet.engine`` task running ``request``, written to a plan file in
    ``workdir`` that the action plugin reads on the controller (so nothing in a patch is ever
    read as a Jinja template). ``txn`` (an undo): the transaction, a template of the apply's
    registered result. ``extra``: more task keywords (``register``, ``when``)."""
    path = workdir / f"plan-{len(list(workdir.glob('plan-*.json')))}.json"
    path.write_text(json.dumps({"request": request}))
    return {"name": name, ENGINE_MODULE: {"plan": str(path), **({"txn": txn} if txn else {})},
            **extra}


@dataclass(frozen=True)
class TaskResult:
    """One task on one host, as the collection's callback wrote it."""

    host: str
    task: str
    action: str
    status: str  # ok | failed | unreachable | skipped
    changed: bool = False
    patchkit: Mapping[str, Any] | None = None  # the engine result, for the engine module
    msg: str = ""
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""


@dataclass
class PlayRun:
    """Per host, its task results in the order they ran."""

    results: dict[str, list[TaskResult]] = field(default_factory=dict)
    returncode: int = 0
    output: str = ""

    def of(self, host: str) -> list[TaskResult]:
        return self.results.get(host, [])


def run_playbook(plays: Sequence[Mapping[str, Any]], *, inventory: str, hosts: Sequence[str],
                 forks: int, workdir: Path, check: bool = False, writes: bool = True,
                 on_output: Callable[[str], None] | None = None) -> PlayRun:
    """Run ``plays`` on ``hosts`` (the inventory's names) with ansible-playbook; return what the
    callback recorded. A host failing is a result; Ansible failing as a whole raises.
    ``writes``: the plays' engine tasks may change the hosts (not a status, a verify, or a
    ``check`` run), which an interrupt's message says of them."""
    workdir.mkdir(parents=True, exist_ok=True)
    step = len(list(workdir.glob("play-*.json")))
    playbook, limit = workdir / f"play-{step}.json", workdir / f"hosts-{step}"
    results_file = workdir / f"results-{step}.jsonl"
    playbook.write_text(json.dumps(list(plays), indent=1))  # JSON is YAML: no emitter needed
    limit.write_text("".join(f"{h}\n" for h in hosts))
    argv = [ansible_tool("ansible-playbook"), "-i", inventory, "--limit", f"@{limit}",
            "--forks", str(max(1, forks)), str(playbook)]
    if check:
        argv.append("--check")
    env = ansible_env({"PATCHKIT_FLEET_RESULTS": str(results_file)})
    # its own session: a terminal's Ctrl-C reaches patchkit alone, which stops Ansible itself
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, errors="replace", start_new_session=True)
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        with stopping_on_signals():
            for line in proc.stdout:
                lines.append(line)
                if on_output is not None:
                    on_output(line.rstrip("\n"))
            proc.wait()
    except (KeyboardInterrupt, Stop) as stop:
        _stop(proc)
        raise _interrupted(getattr(stop, "signum", signal.SIGINT), _results(results_file),
                           inventory, hosts, writes and not check,
                           _results(results_file, STARTED)) from None
    run = PlayRun(returncode=proc.returncode, output="".join(lines),
                  results=_results(results_file))
    # 0 ok, 2 a host failed, 4 a host unreachable: per-host results; anything else is Ansible's
    if proc.returncode not in (0, 2, 4) or (proc.returncode and not run.results):
        ran = sorted(run.results)
        when = (f"after {', '.join(ran)} ran (see patchkit status --inventory {inventory})"
                if ran else "before any host ran")
        raise AnsibleFailed(f"ansible-playbook failed (exit {proc.returncode}) {when}: "
                            f"{_tail(run.output)}", returncode=proc.returncode,
                            playbook=str(playbook), hosts=ran)
    return run


STARTED = "started"  # the callback's line for a task a host's worker is about to run


def _results(path: Path, status: str | None = None) -> dict[str, list[TaskResult]]:
    """Each host's task results the collection's callback wrote to ``path`` so far; with
    ``status`` (:data:`STARTED`), its lines of that status instead."""
    out: dict[str, list[TaskResult]] = {}
    if path.exists():
        for raw in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(raw)
            if (item.get("status") == STARTED) != (status == STARTED):
                continue
            out.setdefault(item["host"], []).append(TaskResult(
                host=item["host"], task=item.get("task", ""), action=item.get("action", ""),
                status=item.get("status", ""), changed=bool(item.get("changed")),
                patchkit=item.get("patchkit"), msg=str(item.get("msg") or ""), rc=item.get("rc"),
                stdout=str(item.get("stdout") or ""), stderr=str(item.get("stderr") or "")))
    return out


STOP_WAIT = 30.0  # seconds ansible-playbook gets to stop on SIGINT before it is killed


def _stop(proc: subprocess.Popen) -> None:
    """Stop ansible-playbook and its workers as Ctrl-C stops it (its SSH sessions close; an
    engine mid-transaction on a host ignores the hang-up and completes: docs/remote.md),
    killed if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.communicate(timeout=STOP_WAIT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        reap(proc)  # a signal may have cut a wait short, its wait lock held


def _interrupted(signum: int, results: dict[str, list[TaskResult]], inventory: str,
                 hosts: Sequence[str], writes: bool,
                 started: dict[str, list[TaskResult]] | None = None) -> Terminated:
    """What an interrupt during a playbook left. A run that writes nothing (``writes`` false):
    the hosts as they were. Else, of ``hosts``: those whose engine task had changed them
    (complete, each its engine's transaction, but their --after-cmd/--health-cmd unfinished),
    those whose engine task started (``started``: the callback's lines) and gave no result:
    it may have been running there, and an engine ignores the dropped connection and
    completes (docs/remote.md), so each is ``unknown`` until a status reads it; and those
    whose engine task never started, as they were (``not_reached``)."""
    name = signal.Signals(signum).name
    head = f"interrupted by {name} during the fleet run; ansible-playbook was stopped: "
    if not writes:
        return Terminated(head + "it writes nothing to the hosts, which are as they were",
                          signal=name, signum=int(signum))
    changed = sorted(host for host, tasks in results.items()
                     if any(t.action == ENGINE_MODULE and t.changed for t in tasks))
    answered = [host for host in hosts
                if any(t.action == ENGINE_MODULE for t in results.get(host, ()))]
    begun = [host for host in hosts
             if any(t.action == ENGINE_MODULE for t in (started or {}).get(host, ()))]
    unknown = [host for host in hosts if host not in answered and (started is None or host in begun)]
    not_reached = [host for host in hosts if host not in answered and host not in unknown]
    said = []
    if changed and all((t.patchkit or {}).get("op") == "undo" for host in changed
                       for t in results[host] if t.action == ENGINE_MODULE and t.changed):
        # an undo wave (its hosts' only change): complete on each, and no hook to confirm it
        said.append(f"of this one, put back as before their last change before it stopped "
                    f"(complete: an undo runs no hooks): {', '.join(changed)}")
    elif changed:
        how = undo_commands({host: [fix for task in results[host] if task.action == ENGINE_MODULE
                                    for fix in (task.patchkit or {}).get("fixes") or ()]
                             for host in changed}, inventory) or "roll the change back"
        said.append(f"of this one, changed before it stopped, not confirmed by their "
                    f"--after-cmd/--health-cmd: {', '.join(changed)}. Check them (patchkit "
                    f"status --inventory {inventory} --limit {','.join(changed)}); to undo: {how}")
    if unknown:
        said.append(f"{'the others' if changed else 'of this one'}, {', '.join(unknown)}, had "
                    f"no result back: the engine there goes on when its connection drops and "
                    f"completes, so each may have completed: run patchkit status --inventory "
                    f"{inventory} --limit {','.join(unknown)}")
    if not_reached:
        said.append(f"{', '.join(not_reached)} {'was' if len(not_reached) == 1 else 'were'} "
                    "not reached: the engine never started there, as it was")
    message = (f"hosts of any earlier wave had finished; {'; '.join(said)}" if said else
               "every host of it had answered, and none was changed by it")
    return Terminated(head + message, signal=name, signum=int(signum), changed=changed,
                      unknown=unknown, not_reached=not_reached)


def undo_commands(changed: Mapping[str, Sequence[Mapping[str, Any]]], inventory: str) -> str:
    """The commands that take back what the hosts' engine results (``changed``: host -> its
    fixes' outcomes) did: ``patchkit rollback`` of the fixes applied or upgraded, ``patchkit
    apply`` of those rolled back, each ``--inventory INV --limit HOSTS``; "" when none."""
    undo: dict[str, list[str]] = {}  # the command that undoes it -> the fixes, in order
    for fixes in changed.values():
        for fix in fixes:
            verb = {"applied": "rollback", "upgraded": "rollback",
                    "rolled-back": "apply"}.get(str(fix.get("outcome")))
            if verb and fix.get("name") not in undo.setdefault(verb, []):
                undo[verb].append(str(fix.get("name")))
    limit = ",".join(changed)
    return "; ".join(f"patchkit {verb} {' '.join(fixes)} --inventory {inventory} --limit {limit}"
                     for verb, fixes in undo.items())


def ansible_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment Ansible runs in: the collection on its path, results to the callback,
    pipelining (one SSH command per task) unless the user's configuration says otherwise."""
    env = dict(os.environ)
    paths = [str(COLLECTIONS_PATH)] + [p for p in env.get("ANSIBLE_COLLECTIONS_PATH", "").split(":") if p]
    env["ANSIBLE_COLLECTIONS_PATH"] = ":".join(paths)
    enabled = [c for c in env.get("ANSIBLE_CALLBACKS_ENABLED", "").split(",") if c]
    env["ANSIBLE_CALLBACKS_ENABLED"] = ",".join(["patchkit.fleet.results", *enabled])
    env.setdefault("ANSIBLE_PIPELINING", "True")
    env.setdefault("ANSIBLE_RETRY_FILES_ENABLED", "False")
    env.setdefault("ANSIBLE_NOCOLOR", "1")
    env.update(extra or {})
    return env


def _tail(text: str, lines: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "no output"
