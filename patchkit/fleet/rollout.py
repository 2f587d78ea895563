"""A fleet rollout of ``apply``, ``rollback`` or ``undo``: every host preflighted before any
write, then waves, stopping at the first host that fails (docs/fleet.md, "What a rollout
does")."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..engine.contract import CHANGED, DONE, PRIMARY_ROOT, WOULD_CHANGE, WOULD_UNDO, WOULD_UPGRADE
from ..errors import HostUnreachable, PatchkitError, RolloutStopped, Terminated, UsageError
from ..engine.contract import WRITES
from ..hooks import on_host
from ..results import file_where
from .ansible import ENGINE_MODULE, Host, PlayRun, TaskResult, engine_task, run_playbook, undo_commands

#: Per fix a host would get: (fix name, "name v2" or "name v1->v2"; an undo's as its result
#: line says it, "name v2 -> v1" or "name v2 -> not applied").
Changes = tuple[tuple[str, str], ...]
#: The ops a rollout runs, the engine's that write: each changes hosts, so each has its
#: ``DONE`` host state.
ROLLOUT_OPS = WRITES
#: The host states that stop a rollout (``FleetReport.error`` names those hosts).
STOPPING = ("unreachable", "refused", "failed", "unknown")
#: The op that undoes a wave's change where its transaction kept no undo point (``--commit``).
OPPOSITE = {"apply": "rollback", "rollback": "apply"}


@dataclass(frozen=True)
class FleetOptions:
    """How a rollout runs (the CLI's ``--waves``, ``--max-fail``, ``--forks``, ...)."""

    waves: tuple[str, ...] = ("100%",)
    max_fail: int = 0  # unreachable hosts tolerated; a failing host always stops the rollout
    forks: int = 5
    health_cmd: str | None = None
    after_cmd: str | None = None
    dry_run: bool = False
    health_limit: float | None = None  # when the health command is killed on the host


@dataclass(frozen=True)
class HostReport:
    """One host at the end of a run. ``state``: applied | rolled-back | undone | unchanged |
    untouched | unreachable | refused | failed | unknown | would-apply | would-roll-back |
    would-undo | ok (verify, status)."""

    host: str
    state: str
    detail: str = ""
    wave: int | None = None
    result: Mapping[str, Any] | None = None  # the host's last engine result
    #: the run's change was made and then taken back there (a failed hook's undo): the host's
    #: files are as before the run, so its server has nothing new to restart for
    undone: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "state": self.state, "detail": self.detail, "wave": self.wave,
                "result": self.result}


@dataclass(frozen=True)
class FleetReport:
    op: str
    dry_run: bool
    hosts: tuple[HostReport, ...]
    waves: tuple[tuple[str, ...], ...] = ()
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()  # what hosts get -> the hosts
    stopped: str | None = None  # why the rollout stopped before every host was done

    @property
    def error(self) -> PatchkitError | None:
        """Why the rollout stopped, as the error a script reads (``--json``): more hosts
        unreachable than the budget allows, or a host refused, failed or rolled back."""
        if self.stopped is None:
            return None
        hosts = [h.host for h in self.hosts if h.state in STOPPING
                 or self.op == "apply" and h.state == "rolled-back"]  # an apply undone there
        if self.stopped.startswith("unreachable"):
            return HostUnreachable(self.stopped, hosts=hosts)
        return RolloutStopped(self.stopped, hosts=hosts)

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code

    def diffs(self) -> dict[tuple[str, str, str], list[str]]:
        """(fix, ``root:path``, diff) -> the hosts a dry run would write that diff on: each
        distinct diff once."""
        out: dict[tuple[str, str, str], list[str]] = {}
        for host in self.hosts:
            for fix in (host.result or {}).get("fixes") or ():
                for f in fix.get("files") or ():
                    if f.get("diff"):
                        key = (fix["name"], file_where(f), f["diff"].rstrip())
                        out.setdefault(key, []).append(host.host)
        return out

    def to_json(self) -> dict[str, Any]:
        error = self.error
        return {"op": self.op, "dry_run": self.dry_run, "ok": error is None,
                **({} if error is None else {"error": error.to_dict()}), "stopped": self.stopped, "waves": [list(w) for w in self.waves],
                "groups": [{"change": label, "hosts": list(hosts)} for label, hosts in self.groups],
                "hosts": [h.to_json() for h in self.hosts]}


def parse_waves(spec: str) -> tuple[str, ...]:
    """``1,25%,100%`` -> its parts, each a host count or a percentage of the hosts to change."""
    parts = tuple(p.strip() for p in spec.split(","))
    if not spec.strip():
        raise UsageError("--waves is empty; e.g. --waves 1,25%,100%", option="--waves")
    if "" in parts:  # "1,,2": a count left out, not a wave to skip
        raise UsageError(f"--waves {spec!r} has an empty part; give a host count or a percentage "
                         "between each two commas, e.g. --waves 1,25%,100%", option="--waves")
    for part in parts:
        number = part[:-1] if part.endswith("%") else part
        if not number.isdigit() or int(number) < 1 or (part.endswith("%") and int(number) > 100):
            raise UsageError(f"--waves {spec!r}: {part!r} is neither a host count (1 or more) nor a "
                             "percentage (1% to 100%); e.g. --waves 1,25%,100%", option="--waves")
    return parts


def split_waves(hosts: Sequence[str], waves: Sequence[str]) -> list[list[str]]:
    """Ansible's ``serial``: each part sizes one batch of ``hosts``; the last part repeats."""
    batches, left, i = [], list(hosts), 0
    while left:
        part = waves[min(i, len(waves) - 1)]
        size = (max(1, math.ceil(len(hosts) * int(part[:-1]) / 100)) if part.endswith("%")
                else int(part))
        batches.append(left[:size])
        left, i = left[size:], i + 1
    return batches


@dataclass
class Rollout:
    """One rollout: ``request(op, names, dry_run)`` renders an engine request on the controller."""

    op: str
    names: list[str]
    hosts: list[Host]
    inventory: str
    workdir: Path
    request: Callable[[str, list[str], bool], dict[str, Any]]
    options: FleetOptions = field(default_factory=FleetOptions)
    progress: Callable[[str], None] = lambda _line: None

    def run(self) -> FleetReport:
        preflight = self._play([self._engine_task(self.op, self.names)], check=True,
                               hosts=[h.name for h in self.hosts], label="preflight")
        reports, todo = {}, {}
        for host in self.hosts:
            report, changes = self._preflighted(host.name, preflight.of(host.name))
            reports[host.name] = report
            if changes:
                todo[host.name] = changes
        for name, why in _same_trees(reports, self.op).items():
            reports[name] = replace(reports[name], state="refused", detail=why)
            todo.pop(name, None)
        groups = _groups(todo)
        unreachable = [h for h, r in reports.items() if r.state == "unreachable"]
        refused = [h for h, r in reports.items() if r.state == "refused"]
        stopped = None
        if refused:
            stopped = (f"preflight refused {len(refused)} host(s) ({', '.join(refused)}); nothing "
                       "was written on any host")
        elif len(unreachable) > self.options.max_fail:
            stopped = (f"unreachable: {len(unreachable)} host(s) ({', '.join(unreachable)}) in "
                       f"preflight, over --max-fail {self.options.max_fail}; nothing was written")
        if stopped or self.options.dry_run:
            return self._report(reports, stopped, groups=groups)
        waves = split_waves(list(todo), self.options.waves)
        for number, wave in enumerate(waves, 1):
            self.progress(f"wave {number}/{len(waves)}: {', '.join(wave)}")
            try:
                run = self._wave(wave, todo, {h: str((reports[h].result or {}).get("undoes") or "")
                                              for h in wave})
            except Terminated as stop:  # the earlier waves' hosts stay changed: said, named
                raise self._stopped_after(stop, reports) from None
            for host_name in wave:
                reports[host_name] = replace(self._waved(host_name, run.of(host_name)), wave=number)
            failed = [h for h in wave if reports[h].state not in (DONE[self.op], "unchanged", "unreachable")]
            unreachable = [h for h, r in reports.items() if r.state == "unreachable"]
            standing = [h for h in failed if STANDS in reports[h].detail]
            if failed:
                stopped = (f"wave {number} failed on {', '.join(failed)}; no later wave started"
                           + (f"; the change stands, not confirmed, on {', '.join(standing)} (its "
                              "undo failed: its row says what to run)" if standing else ""))
            elif len(unreachable) > self.options.max_fail:
                stopped = (f"unreachable: {len(unreachable)} host(s) ({', '.join(unreachable)}), "
                           f"over --max-fail {self.options.max_fail}; no later wave started")
            if stopped:
                break
        return self._report(reports, stopped, waves=waves, groups=groups)

    def _stopped_after(self, stop: Terminated, reports: Mapping[str, HostReport]) -> Terminated:
        """An interrupt in a later wave, with what the earlier waves did: their hosts are
        changed and confirmed, and a fleet left part changed is to be seen and chosen about."""
        earlier = [h for h, r in reports.items() if r.wave is not None and r.state == DONE[self.op]]
        if not earlier:
            return stop
        inventory = str(self.inventory)
        how = undo_commands({h: (reports[h].result or {}).get("fixes") or () for h in earlier},
                            inventory)
        said = (f"{stop.message}. Earlier waves changed {', '.join(earlier)} (complete and "
                f"confirmed), so the fleet is part changed: patchkit status --inventory "
                f"{inventory} shows it; run this rollout again to go on" + (
                    f", or take theirs back: {how}" if how else ""))
        return type(stop)(said, **dict(stop.details, earlier=earlier))

    # -- plays ---------------------------------------------------------------------------------    # -- plays ---------------------------------------------------------------------------------

    def _engine_task(self, op: str, names: list[str], **extra: Any) -> dict[str, Any]:
        return engine_task(self.workdir, self.request(op, names, False), f"patchkit {op}", **extra)

    def _play(self, tasks: list[dict[str, Any]], *, hosts: list[str], label: str,
              check: bool = False) -> PlayRun:
        self.progress(f"{label}: {len(hosts)} host(s)")
        play = {"name": f"patchkit {self.op} ({label})", "hosts": "all", "gather_facts": False,
                "tasks": tasks}
        return run_playbook([play], inventory=self.inventory, hosts=hosts, forks=self.options.forks,
                            workdir=self.workdir, check=check, on_output=None)

    def _wave(self, wave: list[str], todo: Mapping[str, Changes],
              undoes: Mapping[str, str]) -> PlayRun:
        """One play per group of hosts getting the same change: apply, after-cmd, health-cmd;
        on a failure after the engine changed the host, roll that change back (the rescue).
        An undo's play is its engine task alone (no hooks: nothing fails after it), each host's
        pinned to the transaction its preflight checked (``undoes``): a change made there since
        is refused by the engine, not undone unseen."""
        plays = []
        for changes, hosts in _groups({h: todo[h] for h in wave}):
            play: dict[str, Any] = {"name": f"patchkit {self.op}: {changes}",
                                    "hosts": ",".join(hosts), "gather_facts": False}
            if self.op == "undo":  # it names no fix: each host undoes its own last change
                play["vars"] = {"patchkit_undoes": {h: undoes.get(h, "") for h in hosts}}
                play["tasks"] = [self._engine_task(
                    self.op, [], register="patchkit_run",
                    txn="{{ patchkit_undoes[inventory_hostname] | default('') }}")]
                plays.append(play)
                continue
            names = [name for name, _label in todo[hosts[0]]]
            block = [self._engine_task(self.op, names, register="patchkit_run")]
            block += _shell("after-cmd", self.options.after_cmd, "patchkit_run is changed")
            block += _shell("health-cmd", self.options.health_cmd, "patchkit_run is changed",
                            self.options.health_limit)
            play["tasks"] = [{"block": block, "rescue": self._rescue(names)}]
            plays.append(play)
        return run_playbook(plays, inventory=self.inventory, hosts=wave, forks=self.options.forks,
                            workdir=self.workdir)

    def _rescue(self, names: list[str]) -> list[dict[str, Any]]:
        """Put the host back as before its wave's change: the undo of the transaction it named;
        the opposite op over the fixes where it kept no undo point (--commit: the rollback
        reverts it); then the after-cmd again."""
        changed = "patchkit_run is succeeded and patchkit_run is changed"
        rescue = [engine_task(self.workdir, self.request("undo", [], False), "patchkit undo",
                              register="patchkit_undo", txn="{{ patchkit_run.patchkit.txn }}",
                              when=f"{changed} and patchkit_run.patchkit.txn is defined"),
                  self._engine_task(OPPOSITE[self.op], names, register="patchkit_opposite",
                                    when=f"{changed} and patchkit_run.patchkit.txn is not defined")]
        undone = ("(patchkit_undo is succeeded and patchkit_undo is changed) or "
                  "(patchkit_opposite is succeeded and patchkit_opposite is changed)")
        return rescue + _shell("after-cmd", self.options.after_cmd, undone)

    # -- reading results -----------------------------------------------------------------------

    def _preflighted(self, host: str, tasks: list[TaskResult]) -> tuple[HostReport, Changes]:
        task = _engine(tasks)
        if task is None or task.status == "unreachable":
            return HostReport(host, "unreachable", _unreached(task)), ()
        result = task.patchkit or {}
        if task.status != "ok":
            return HostReport(host, "refused", host_error(task), result=result), ()
        # a stale record to forget (a lost one the host's release no longer needs) is a
        # change too: the wave's engine drops it, as a sync of the one target does
        changes = tuple((f["name"], _change(f)) for f in result.get("fixes") or ()
                        if f.get("outcome") in WOULD_CHANGE[self.op] or "forgets" in f)
        state = (WOULD_CHANGE[self.op][0] if self.options.dry_run else "untouched") if changes else "unchanged"
        return HostReport(host, state, _label(changes), result=result), changes

    def _waved(self, host: str, tasks: list[TaskResult]) -> HostReport:
        run = _engine(tasks, f"patchkit {self.op}")
        if run is None or run.status == "unreachable":
            return HostReport(host, "unreachable", _unreached(run) + "; the engine may have run "
                              "there: `patchkit status --inventory` recovers and shows it")
        if run.status == "failed" and not run.patchkit:  # the module died: no engine result
            return HostReport(host, "unknown", f"{_last(run.msg) or 'no result'}; the engine "
                              "stopped without a result: `patchkit status --inventory` finishes "
                              "or undoes its run there and shows it")
        if run.status == "failed" and (run.patchkit or {}).get("wrote") is False:
            # refused before its transaction wrote anything (a tree made read-only since the
            # preflight, a lock): not a change undone
            return HostReport(host, "refused", host_error(run), result=run.patchkit)
        if run.status == "failed":  # the engine's transaction put every file back
            state = "rolled-back" if self.op == "apply" else "failed"  # undo: the host as it was
            return HostReport(host, state, host_error(run), result=run.patchkit)
        bad = next((t for t in tasks if t.action == "ansible.builtin.shell" and t.status != "ok"
                    and t.status != "skipped"), None)
        if bad is None:  # the host's state is what its engine did, not what preflight planned
            fixes = (run.patchkit or {}).get("fixes") or ()
            others = "; ".join(f"{f.get('name')}: {f.get('outcome')}"
                               + (f" ({f['detail']})" if f.get("detail") else "")
                               for f in fixes if f.get("outcome") not in CHANGED[self.op])
            done = any(f.get("outcome") in CHANGED[self.op] or "forgets" in f for f in fixes)
            return HostReport(host, DONE[self.op] if done or not fixes else "unchanged",
                              others if not done else "", result=run.patchkit)
        undo = next((t for t in tasks if t.task.startswith("patchkit ") and t is not run
                     and t.action == ENGINE_MODULE and t.status != "skipped"), None)
        why = (f"{bad.task} failed (exit {bad.rc}): {_last(bad.stderr or bad.stdout or bad.msg)}"
               if bad.rc is not None else  # the host went away while it ran
               f"{bad.task} did not finish: {_said(bad.stderr or bad.stdout or bad.msg)}")
        if undo is not None and undo.status == "ok":
            return HostReport(host, "rolled-back" if self.op == "apply" else "failed",
                              f"{why}; the change was undone", result=undo.patchkit, undone=True)
        inventory = str(self.inventory)
        how = undo_commands({host: (run.patchkit or {}).get("fixes") or ()}, inventory)
        return HostReport(host, "failed", (
            f"{why}; undoing the change failed too: "
            f"{_said(host_error(undo)) if undo else 'it did not run'}; {STANDS} by its "
            f"{bad.task}: check it (patchkit status --inventory {inventory} --limit {host})"
            + (f"; to undo it: {how}" if how else "") + ". A run of this rollout again finds it "
            "changed and leaves it so, with no check"), result=run.patchkit)

    def _report(self, reports: dict[str, HostReport], stopped: str | None, *, waves: Sequence[Sequence[str]] = (),
                groups: Sequence[tuple[str, tuple[str, ...]]] = ()) -> FleetReport:
        return FleetReport(op=self.op, dry_run=self.options.dry_run,
                           hosts=tuple(reports[h.name] for h in self.hosts),
                           waves=tuple(tuple(w) for w in waves), groups=tuple(groups),
                           stopped=stopped)


def _same_trees(reports: Mapping[str, HostReport], op: str) -> dict[str, str]:
    """host -> why it is refused: it reaches the same tree as an earlier inventory host
    (machine, device and inode of the state root, as the engine there reported them), or a
    root the run would write on it is the same directory as one the earlier host's run writes."""
    seen: dict[tuple, tuple[str, str]] = {}  # (machine, dev, ino) -> (host, root)
    out = {}
    for host, report in reports.items():
        result = report.result or {}
        tree = result.get("tree")
        if not isinstance(tree, Mapping) or "ino" not in tree:
            continue
        machine = tree.get("machine")
        key = (machine, tree.get("dev"), tree.get("ino"))
        if key in seen and seen[key][1] == "":
            out[host] = (f"reaches the same tree as {seen[key][0]} ({tree.get('path')} on one "
                         "machine): one apply there would be reported for both hosts. Remove "
                         "one of them from the inventory, or point it at a tree of its own")
            continue
        seen.setdefault(key, (host, ""))
        written = {f.get("root") for fix in result.get("fixes") or ()
                   if fix.get("outcome") in WOULD_CHANGE[op] for f in fix.get("files") or ()}
        for name in sorted(r for r in written if r and r != PRIMARY_ROOT):
            where = (tree.get("roots") or {}).get(name) or {}
            if "ino" not in where:
                continue
            other = seen.setdefault((machine, where.get("dev"), where.get("ino")), (host, name))
            if other[0] != host:
                out[host] = (f"its root {name} ({where.get('path')}) is the same directory as "
                             f"{other[0]}'s root {other[1] or 'sglang'} on one machine: the "
                             f"change there would be made once and reported for both hosts, and "
                             f"a rollback on one would take it from the other. Give each host a "
                             f"{name} directory of its own, or leave one of them out (--limit)")
                break
    return out


def _change(fix: Mapping[str, Any]) -> str:
    """What a host would get of ``fix`` (a preflight's result entry), for the groups."""
    name, version, was = fix["name"], fix.get("version"), fix.get("from_version")
    if "forgets" in fix:
        return f"{name} v{fix['forgets']} record forgotten ({fix.get('outcome')})"
    if fix.get("outcome") == WOULD_UNDO:  # as the undo's result line says it
        back = f"v{version}" if version is not None else "not applied"
        if fix.get("not_holding"):  # its record alone: the files do not hold that version
            back += " (its record: lost or drifted)"
        return f"{name} v{was} -> {back}" if was is not None else f"{name} {back}"
    return f"{name} v{was}->v{version}" if fix.get("outcome") == WOULD_UPGRADE else f"{name} v{version}"


def _label(changes: Changes) -> str:
    return ", ".join(label for _name, label in changes)


def _groups(todo: Mapping[str, Changes]) -> list[tuple[str, tuple[str, ...]]]:
    """Hosts grouped by the change they get, in host order."""
    groups: dict[str, list[str]] = {}
    for host, changes in todo.items():
        groups.setdefault(_label(changes), []).append(host)
    return [(label, tuple(hosts)) for label, hosts in groups.items()]


def _shell(name: str, command: str | None, when: str, limit: float | None = None
           ) -> list[dict[str, Any]]:
    """A hook's task: ``command`` under the wrapper an ``ssh://`` target's hooks run under
    (``hooks.on_host``), started by the Python the engine task ran with: done when its shell
    exits (a restarted server holding its output does not hold the task), killed with what it
    started after ``limit`` seconds."""
    if not command:
        return []
    python = '{{ patchkit_run.python | default("python3") }}'  # the engine task's interpreter
    return [{"name": name, "ansible.builtin.shell": on_host(command, limit, python), "when": when}]


def _engine(tasks: Sequence[TaskResult], name: str | None = None) -> TaskResult | None:
    return next((t for t in tasks if t.action == ENGINE_MODULE and (name is None or t.task == name)),
                None)


def host_error(task: TaskResult | None) -> str:
    """Why a host's engine task failed: the engine's message, else Ansible's. A root or an
    interpreter the engine there could not use names the inventory variable it came from
    (a host's checks' python is its patchkit_python, not --python: a fleet takes none)."""
    if task is None:
        return "no result"
    error = (task.patchkit or {}).get("error") or {}
    said = str(error.get("message") or task.msg or "failed")
    details = error.get("details") or {}
    root = details.get("root")
    if root and said.startswith(f"root {root}:"):
        var = "patchkit_target" if root == "sglang" else f"patchkit_roots.{root}"
        said += f" (root {root} is the host's {var} in the inventory)"
    elif details.get("option") == "--python" and details.get("path"):
        said = (f"interpreter {details['path']} does not exist or is not executable; it is the "
                f"patchkit_python of host {task.host} in the inventory, the python the fixes' "
                "checks run with: set it to the python of the environment that runs SGLang "
                "there, or remove it (then the engine's interpreter runs them)")
    return said


def _unreached(task: TaskResult | None) -> str:
    return _last(task.msg) if task is not None and task.msg else "no result from the host"


#: What a failed host's detail says when its change was made and its undo failed.
STANDS = "the change stands there, not confirmed"


def _said(text: str) -> str:
    """A message of several lines (Ansible's, ssh's) as one, cut at 300 characters."""
    return " ".join(line.strip() for line in (text or "").splitlines() if line.strip())[:300]


def _last(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
