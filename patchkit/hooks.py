"""``--after-cmd`` and ``--health-cmd`` on one target, local or ``ssh://`` (docs/cli.md, "After
the change"), with the fleet's semantics (docs/fleet.md): after a change, the after-command
(a restart), then the health check; either failing undoes the change and runs the
after-command again. :func:`after_change` is the one entry point; ``apply``, ``rollback`` and
``sync`` call it with the undo of their own change.

The built-in health kind ``sglang:URL`` waits for an SGLang server's ``/health`` (or
``/health_generate``) to answer 200 within a timeout; it runs as a small Python program on the
target's host, so it checks the server where it runs (and works in a fleet's shell task too)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from typing import Any, Callable, Mapping, Sequence

from .engine.contract import CHANGED
from .engine.recordbase import Record, record_dataclass
from .errors import (ChangeNotUndone, CheckFailed, ConnectionLost, PatchkitError, Stop, Terminated,
                     UsageError, stopping_on_signals)

SGLANG = "sglang:"
DEFAULT_HEALTH_TIMEOUT = 120.0
#: What a command's failure quotes of its output.
_TAIL = 12

_PROBE = r"""import sys, time, urllib.error, urllib.request
url, limit = sys.argv[1], float(sys.argv[2])
end, last = time.monotonic() + limit, "no answer"
while True:
    left = end - time.monotonic()
    if left <= 0:
        sys.exit("%s: %s within %gs" % (url, last, limit))
    try:
        with urllib.request.urlopen(url, timeout=min(left, 10.0)) as answer:
            if answer.status == 200:
                print("%s: HTTP 200" % url)
                sys.exit(0)
            last = "HTTP %d" % answer.status
    except urllib.error.HTTPError as exc:
        last = "HTTP %d" % exc.code
    except Exception as exc:
        last = "%s: %s" % (type(exc).__name__, exc)
    time.sleep(max(0.0, min(0.5, end - time.monotonic())))
"""

#: On an ssh host, a hook runs under this: its output goes to a file and the wrapper returns
#: when the shell exits (a process the hook leaves running keeps the file, not the ssh session,
#: open), and a time limit kills the command's process group there (killing the local ssh
#: would leave it running on the host). Arguments: the limit (0: none), the command, the note.
_ON_HOST = r"""import os, signal, subprocess, sys, tempfile, threading
limit, command = float(sys.argv[1]) or None, sys.argv[2]
out = tempfile.TemporaryFile()
proc = subprocess.Popen([os.environ.get("SHELL") or "/bin/sh", "-c", command], stdin=subprocess.DEVNULL,
                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
def said():
    out.seek(0)
    sys.stdout.buffer.write(out.read())
    sys.stdout.flush()
def stop():
    for signum, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, signum)
        except OSError:
            pass
        if grace:
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
def gone():
    sys.stdin.buffer.read()  # the client keeps this open while it waits: closed, it went
    stop()
    os._exit(130)
if sys.argv[4:] == ["watch"]:
    threading.Thread(target=gone, daemon=True).start()
try:
    code = proc.wait(timeout=limit)
except subprocess.TimeoutExpired:
    stop()
    said()
    print("\n%s" % (sys.argv[3] % limit), flush=True)
    os._exit(124)  # not sys.exit: the watching thread holds stdin, which finalizing would wait on
said()
os._exit(code)
"""
_KILLED = "(killed after %gs)"


def refuse_hooks_on_undo(*, after_cmd: str | None, health_cmd: str | None) -> None:
    """``undo`` (one target or a fleet) runs no hooks: a failing hook asks for the change to be
    undone, and an undo has no undo of its own."""
    given = [flag for flag, value in (("--after-cmd", after_cmd), ("--health-cmd", health_cmd))
             if value]
    if given:
        raise UsageError(f"undo takes no {' or '.join(given)}: a hook that fails has the change "
                         "it follows undone, and an undo has no undo. Undo, then run your "
                         "restart and checks yourself (the server runs the undone code only "
                         "once restarted)", option=given[0])


class HookFailed(CheckFailed):
    """A command run after a change failed, and the change was undone (``details.after``:
    what ran, and the undo's result). Raised as one of the two below, which say which."""

    after: AfterChange | None = None  # the same, as the record a caller in Python reads


class AfterCommandFailed(HookFailed):
    """``--after-cmd`` (e.g. the server's restart) failed after a change; the change was undone."""


class HealthCheckFailed(HookFailed):
    """``--health-cmd`` failed after a change; the change was undone."""


def health_command(spec: str | None, *, timeout: float = DEFAULT_HEALTH_TIMEOUT,
                   python: str | None = None) -> str | None:
    """The shell command a ``--health-cmd`` runs: itself, or for ``sglang:URL`` the probe of
    the server's health endpoint (``/health`` when the URL has no path, or just ``/``)."""
    if spec is None or not spec.startswith(SGLANG):
        return spec
    url = spec[len(SGLANG):]
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--health-cmd {spec}: write the server's URL after sglang:, e.g. "
                         "sglang:http://127.0.0.1:30000 or sglang:http://127.0.0.1:30000/health_generate",
                         option="--health-cmd")
    from urllib.parse import urlsplit

    if urlsplit(url).path in ("", "/"):  # the server itself: its health endpoint
        url = url.rstrip("/") + "/health"
    if timeout <= 0:
        raise UsageError("--health-timeout must be more than 0 seconds", option="--health-timeout")
    return shlex.join([python or "python3", "-c", _PROBE, url, f"{timeout:g}"])


@record_dataclass(frozen=True)
class CommandRun(Record):
    """One command run on the target's host: which (``after-cmd``, ``health-cmd``), its exit."""

    what: str
    command: str
    returncode: int
    output: str
    timed_out: float | None = None  # killed after this many seconds (exit 124)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "command": self.command, "exit": self.returncode,
                "output": self.output, "timed_out": self.timed_out is not None}


@record_dataclass(frozen=True)
class AfterChange(Record):
    """What ran after a change; ``undone``: the undo's result when a command failed."""

    ran: tuple[CommandRun, ...] = ()
    undone: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"ran": [r.to_json() for r in self.ran],
                "undone": None if self.undone is None else self.undone.to_json()}


def health_limit(spec: str | None, timeout: float) -> float:
    """When a ``--health-cmd`` is killed: a shell check at the timeout; ``sglang:URL``'s probe
    stops itself at it, and this is a backstop."""
    return timeout + 15 if spec is not None and spec.startswith(SGLANG) else timeout


def on_host(command: str, timeout: float | None, python: str = "python3",
            watch: bool = False) -> str:
    """The shell command that runs ``command`` on a host under :data:`_ON_HOST` (``python``,
    as the shell is to read it, starts it): done when its shell exits, its process group killed
    after ``timeout`` seconds (exit 124, its output ending ``(killed after Ns)``). An ssh
    target's hooks run so, and a fleet host's (``python`` an Ansible expression there).
    ``watch``: the client keeps the session's input open while it waits, and its end (the
    client interrupted, killed, or its connection lost) stops the command's process group
    there too, as an interrupt does a local hook's."""
    words = ["-c", _ON_HOST, f"{timeout or 0:g}", command, _KILLED] + (["watch"] if watch else [])
    return f"{python} {shlex.join(words)}"


def run_on(target: Any, what: str, command: str, timeout: float | None = None) -> CommandRun:
    """``command`` through ``sh -c`` where the target's files are: here, or on its ssh host;
    done when its shell exits (what it started may run on); past ``timeout`` seconds its
    process group is killed (on an ssh host, by the wrapper there)."""
    import subprocess  # here: only a command given with --after-cmd or --health-cmd runs one
    import tempfile

    remote, on_the_host = getattr(target, "is_remote", False), None
    if remote:
        from .targets.transport import ssh_argv

        argv = ssh_argv(target.spec, on_host(command, timeout,
                                             shlex.quote(getattr(target, "python", None) or "python3"),
                                             watch=True))
        on_the_host, timeout = timeout, None if timeout is None else timeout + 15  # then ssh's
    else:
        argv = ["/bin/sh", "-c", command]
    # Its output goes to a file, read once the shell exits: a process the hook leaves running
    # (a restarted server) holds the file, and the hook is done when its shell is.
    with tempfile.TemporaryFile() as out:
        try:  # its own process group: a timeout or an interrupt stops what it started too
            # a remote hook's session input stays open until the hook ends: its end stops
            # the hook on the host (``on_host``'s watch)
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if remote else subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return CommandRun(what, command, 127, f"cannot run {argv[0]}: {exc.strerror}")
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return CommandRun(what, command, 124, _read(out) + "\n" + _KILLED % timeout,
                              timed_out=timeout)
        except BaseException:  # an interrupt: the command and its children go with it
            _stop_group(proc)
            raise
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
        said = _read(out)
    # the host's wrapper killed it at its limit: its last line says so
    killed = (remote and on_the_host is not None and proc.returncode == 124
              and said.rstrip().endswith(_KILLED % on_the_host))
    return CommandRun(what, command, proc.returncode, said,
                      timed_out=on_the_host if killed else None)


def _read(out: Any) -> str:
    """What a hook wrote to its output file so far."""
    out.seek(0)
    return out.read().decode("utf-8", "replace")


def _stop_group(proc: Any, grace: float = 5.0) -> None:
    """SIGTERM to the command's process group; after ``grace`` s (or once the shell is gone),
    SIGKILL to whatever of the group is left."""
    import subprocess

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def after_change(target: Any, changed: Sequence[str], *, after_cmd: str | None,
                 health_cmd: str | None, undo: Callable[[], Any],
                 health_timeout: float = DEFAULT_HEALTH_TIMEOUT, hold: Any = None,
                 op: str = "apply") -> AfterChange:
    """Run ``after_cmd`` then ``health_cmd`` (a shell command or ``sglang:URL``, either stopped
    after ``health_timeout`` seconds) when the run changed the fixes ``changed``; nothing when
    it changed none. If either fails: ``undo()`` (the undo of exactly this run's change, e.g.
    a rollback of ``changed``), ``after_cmd`` again, and :class:`AfterCommandFailed` or
    :class:`HealthCheckFailed` (a :class:`HookFailed`) carrying the :class:`AfterChange` as
    ``after``. ``hold``: the ``api.held`` the change ran in, whose lock the hooks and the undo
    keep (read-only runs read while the commands run); ``op``: the change's (``apply``,
    ``rollback``), for the command a failed undo leaves to run."""
    if not changed or not (after_cmd or health_cmd):
        return AfterChange()
    python = (getattr(target, "python", None) if getattr(target, "is_remote", False)
              else sys.executable)  # the probe needs only the standard library
    health = health_command(health_cmd, timeout=health_timeout, python=python)
    ran: list[CommandRun] = []
    doing = ["", ""]  # the option and the command running now: what an interrupt stopped
    try:
        with stopping_on_signals():
            return _after_change(target, changed, after_cmd, health_cmd, health, undo, ran, doing,
                                 _Limits(health_timeout, hold, op))
    except (KeyboardInterrupt, Stop, Terminated) as stop:
        if isinstance(stop, Terminated) and doing[0] != "undo":
            raise  # said already (the undo's own interrupt is said below)
        signum = getattr(stop, "signum", None) or (stop.details.get("signum") if isinstance(
            stop, Terminated) else None) or signal.SIGINT
        name = signal.Signals(signum).name
        undo_it, left = "to undo the change: patchkit undo", dict[str, Any]()
        if doing[0] == "undo":
            where, undo_it, left = _undo_interrupted(target, changed, doing, after_cmd)
        elif doing[0] == "after-cmd again":
            where = ("while --after-cmd ran again (%s): a check had failed and the change was "
                     "undone (%s put back as before)" % (doing[1], ", ".join(changed)))
            undo_it = "run the --after-cmd yourself, so the server loads the restored files"
        else:
            where = ("while --%s ran (%s): the change stands (%s), not confirmed by a health "
                     "check" % (doing[0], doing[1], ", ".join(changed)))
        if doing[0] != "undo":  # the hook the signal stopped: ``after`` lists the finished ones
            left["stopped"] = {"what": doing[0].replace(" again", ""), "command": doing[1]}
        raise Terminated(
            f"interrupted by {name} {where}. Check the server and run patchkit status on the "
            f"target; {undo_it}",
            signal=name, signum=int(signum), after=AfterChange(tuple(ran)).to_json(),
            **left) from None


def _last_change(target: Any) -> tuple[Any, Any, bool] | None:
    """The transaction the target's state names, the journal a run left (None: none) and
    whether an undo point for that transaction is kept; None where it is not known here (a
    remote target: its state is on the host)."""
    if getattr(target, "is_remote", False):
        return None
    from .engine.recovery import undo_point
    from .engine.store import Store
    from .targets import state_root_of

    store = Store(target.roots[state_root_of(target.roots)])
    try:
        txn = store.read_state().txn
        return txn, store.read_journal(), txn is not None and undo_point(store) == txn
    except (PatchkitError, OSError):
        return None


def _undo_interrupted(target: Any, changed: Sequence[str], doing: list[str],
                      after_cmd: str | None) -> tuple[str, str, dict[str, str]]:
    """What an interrupt of a failed check's undo left, read from the target's state against
    the transaction it named before the undo began (``doing[1]``): where it stopped, what to
    run, and ``undo`` for the error's details (completed, not-completed, unknown)."""
    fixes = ", ".join(changed)
    where = "while the change (%s) was being undone after a failed check: " % fixes
    now = _last_change(target)
    if now is None or doing[1] == "":
        return (where + "whether the undo completed is not known here", "if status shows the "
                "change still there, take it out with patchkit undo", {"undo": "unknown"})
    txn, journal, undoable = now
    if txn != doing[1]:  # the undo reached its commit point: the state is the one before
        rest = ("; the next patchkit run on the target finishes its bookkeeping" if journal
                is not None else "")
        again = ("--after-cmd was not run again: run it yourself, so the server loads the "
                 "restored files" if after_cmd else "restart the server if it loaded the change")
        return (where + "the undo completed, %s put back as before%s" % (fixes, rest), again,
                {"undo": "completed"})
    how = ("patchkit undo" if undoable else "patchkit rollback %s" % shlex.join(changed))
    left = ("what it had written was put back" if journal is None else
            "its journal is kept, and the next patchkit run on the target puts back what it had "
            "written")
    return (where + "the undo did not complete (%s), so the change stands (%s), unconfirmed "
            "after the failed check" % (left, fixes), "take the change out with %s" % how,
            {"undo": "not-completed"})


def _undo_cut(lost: ConnectionLost, failed: CommandRun, changed: Sequence[str],
              ran: list[CommandRun]) -> PatchkitError:
    """A remote undo whose session ended after its request reached the engine there: the
    engine goes on when its connection drops, so the undo may well have completed. A signal
    that closed the session is said as an interrupt of the undo (its state not known here);
    a dropped connection as one (exit 14), the failed check first. Never "the change stands"."""
    name = lost.details.get("signal")
    if name:
        return Terminated(lost.message, signal=name, signum=int(signal.Signals[name]))
    return ConnectionLost(
        f"{_failed(failed)}; the undo of {', '.join(changed)} reached the host, then the "
        f"connection was lost, so whether it completed is not known here: {lost.message}",
        **dict(lost.details, after=AfterChange(tuple(ran)).to_json(), undo="unknown"))


@record_dataclass(frozen=True)
class _Limits(Record):
    """What bounds the hooks of one change: the health check's time, the target's lock held
    across them (``hold``, None where it is not) and the op they follow."""

    health_timeout: float
    hold: Any
    op: str

    def readers(self, running: bool) -> None:
        if self.hold is not None:
            self.hold.hooks_running(running)


def _after_change(target: Any, changed: Sequence[str], after_cmd: str | None,
                  health_cmd: str | None, health: str | None, undo: Callable[[], Any],
                  ran: list[CommandRun], doing: list[str], limits: _Limits) -> AfterChange:
    for what, command in (("after-cmd", after_cmd), ("health-cmd", health)):
        if not command:
            continue
        doing[:] = [what, command if what == "after-cmd" else str(health_cmd)]
        timeout = None if what == "after-cmd" else health_limit(health_cmd, limits.health_timeout)
        limits.readers(True)
        done = run_on(target, what, command, timeout)
        ran.append(done if command == health_cmd or what == "after-cmd" else
                   CommandRun(what, str(health_cmd), done.returncode, done.output, done.timed_out))
        if ran[-1].ok:
            continue
        failed = ran[-1]
        known = _last_change(target)  # the change's transaction: an interrupted undo is told by it
        doing[:] = ["undo", "" if known is None or known[0] is None else known[0]]
        limits.readers(False)  # the undo writes: readers wait for it
        try:
            undone = undo()
        except Terminated:  # a signal stopped the undo in the engine: said as an interrupt
            raise
        except ConnectionLost as lost:  # the undo's request reached the host: it goes on there
            raise _undo_cut(lost, failed, changed, ran) from lost
        except Exception as exc:  # the undo's own failure is said with the command's
            cause = exc.to_dict() if isinstance(exc, PatchkitError) else {
                "type": type(exc).__name__, "message": str(exc)}
            raise ChangeNotUndone(
                f"{_failed(failed)}; undoing {', '.join(changed)} failed too, so the change "
                f"stands, unconfirmed: {cause['message']}. {_by_hand(target, changed, limits)}"
                f"{_said(failed)}",
                after=AfterChange(tuple(ran)).to_json(), undo_error=cause) from exc
        doing[:] = ["after-cmd again", after_cmd or ""]
        limits.readers(True)
        again = run_on(target, "after-cmd", after_cmd) if after_cmd else None
        if again is not None:
            ran.append(again)
        result = AfterChange(tuple(ran), undone)
        tail = ("" if again is None else f"; --after-cmd ran again (exit {again.returncode})"
                + ("" if again.ok else ": the server may not be running the restored files"))
        kind: type[HookFailed] = HealthCheckFailed if failed.what == "health-cmd" else AfterCommandFailed
        err = kind(f"{_failed(failed)}; the change was undone ({_as_before(undone, changed)} put "
                   f"back as before){tail}{_said(failed)}", after=result.to_json())
        err.after = result
        raise err
    return AfterChange(tuple(ran))


def _as_before(undone: Any, changed: Sequence[str]) -> str:
    """The fixes an undo put back, each as it now is: ``FIX v2``, ``FIX (not applied)``."""
    fixes = getattr(undone, "fixes", None)
    if not fixes:
        return ", ".join(changed)
    return ", ".join(f"{f.name} v{f.version}" if f.version is not None
                     and f.outcome not in ("rolled-back", "not-applied")
                     else f"{f.name} (not applied)" for f in fixes)


def _failed(run: CommandRun) -> str:
    if run.timed_out is not None:
        return f"--{run.what} timed out after {run.timed_out:g}s (killed): {run.command}"
    return f"--{run.what} failed (exit {run.returncode}): {run.command}"


def _by_hand(target: Any, changed: Sequence[str], limits: _Limits) -> str:
    """What to run when the undo failed: see the target, then take the change out yourself.
    The CLI's note after the error repeats the target options as the user gave them."""
    inverse = "apply" if limits.op == "rollback" else "rollback"
    said = (f"Run `patchkit status`, then take this run's change out with `patchkit {inverse} "
            f"{shlex.join(changed)}`" + (" (with --force when the cause above is a file changed "
                                        "since: it discards that change)" if inverse == "rollback"
                                        else ""))
    if getattr(target, "is_remote", False):
        said += (" (on an ssh:// target the lock is not held through the hooks, so another "
                 "run may have changed the target meanwhile: roll that back first if it "
                 "depends on these fixes)")
    return said


def as_undone(result: Any, after: AfterChange) -> Any:
    """``result`` (an apply, sync or rollback) as the target now is, its change undone after a
    failed hook: each fix the undo put back ``undone`` (``undid``: the run's own outcome;
    ``version``/``from_version`` as the undo says), ``ok`` false, no ``summary`` or ``txn``
    (they named the state undone)."""
    from dataclasses import replace

    from .results import FixOutcome

    put_back = {f["name"]: f for f in (after.undone.to_json().get("fixes") or ())
                if f.get("outcome") == "undone"} if after.undone is not None else {}
    fixes = []
    for fix in result.raw.get("fixes") or ():
        back = put_back.get(fix.get("name"))
        fixes.append(fix if back is None else dict(
            fix, outcome="undone", undid=fix.get("outcome"), version=back.get("version"),
            from_version=back.get("from_version")))
    raw = {k: v for k, v in result.raw.items() if k not in ("summary", "txn")}
    raw.update(ok=False, fixes=fixes, after=after.to_json())
    return replace(result, ok=False, raw=raw, fixes=tuple(FixOutcome.from_dict(f) for f in fixes))


#: Where a failed hook's output starts in its error's message (``--health-cmd said:``).
SAID = "\n--%s said:\n"


def _said(run: CommandRun) -> str:
    """The last lines the failed command printed, below the message (its own lines: output
    without a final newline does not run into what patchkit says)."""
    lines = run.output.strip().splitlines()[-_TAIL:]
    return (SAID % run.what + "  " + "\n  ".join(lines)) if lines else ""


def patchkits_words(message: str, details: Mapping[str, Any]) -> str:
    """An error's message without what its hooks ran or printed (their commands, their
    output): the words patchkit itself says, e.g. the next steps it suggests."""
    ran = (details.get("after") or {}).get("ran") or ()
    for what in dict.fromkeys(str(r.get("what") or "") for r in ran):
        message = message.split(SAID % what, 1)[0]
    for r in ran:
        message = message.replace(str(r.get("command") or ""), "")
    return message


def changed_fixes(result: Any) -> list[str]:
    """The fixes an apply or rollback result changed (what an undo must put back, and what a
    restart is for): a lost fix's rollback only forgets it and writes no file, so it is not."""
    return [f.name for f in result.fixes if changed(result.op, f.outcome, f.files)]


def changed(op: str, outcome: Any, files: Any) -> bool:
    """Whether a fix's outcome of ``op`` changed the target's files (a fleet host's result is
    read with it too)."""
    return outcome in CHANGED.get(op, ()) and bool(files)
