"""The declared check kinds of docs/design.md, shared by preconditions and verification.

Each check returns ``{kind, name, ok, detail, where}`` and fails past its time limit. A regex
``grep`` runs in a worker process that ends itself at the limit: ``re`` cannot be interrupted
in-process (a catastrophic pattern never ends). ``python-syntax`` is one ``ast.parse`` pass in
the engine, the interpreter the worker would be, and fails when that pass took longer.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import UnsafePathError, UsageError, reap
from .contract import CHECK_KINDS, CHECK_TIMEOUTS, grep_holds, is_timeout
from .hunks import decode, sha256_bytes, split_lines
from .paths import PACKAGE, Roots
from .recordbase import Record, record_dataclass

if TYPE_CHECKING:
    import subprocess

Reader = Callable[[str, str], Optional[bytes]]

OUTPUT_LIMIT = 4000


class TimedOut(Exception):
    """A check ran past its time limit."""


@record_dataclass(frozen=True)
class CheckContext(Record):
    """What a fix's checks run against; ``read`` gives a file's bytes (None: absent)."""

    fix: str
    roots: Roots
    python: str
    scripts: Dict[str, str]
    read: Reader


def result(kind: str, name: str, ok: bool, detail: str, where: str) -> Dict[str, Any]:
    return {"kind": kind, "name": name, "ok": bool(ok), "detail": detail, "where": where}


def failure_lines(failures: List[Dict[str, Any]]) -> str:
    """One line per failed check (each carries the ``fix`` it belongs to), for a message."""
    return "\n".join("- fix %s: %s [%s] at %s: %s" % (f["fix"], f["name"], f["kind"], f["where"],
                                                       f["detail"]) for f in failures)


def child_env() -> Dict[str, str]:
    """No fault injection in a check, and no bytecode left in the target."""
    env = {k: v for k, v in os.environ.items() if k != "PATCHKIT_FAULT"}
    return dict(env, PYTHONDONTWRITEBYTECODE="1")


def timed_out(timeout: float) -> str:
    return ("timed out after %g s (the check's time limit; set timeout = SECONDS in the "
            "manifest's check if it needs longer)" % timeout)


class Started:
    """A check's command, started. :meth:`finish` waits for it within its time limit, counted
    from its start (from its input, for one fed on stdin), and gives None when it exited
    ``expect_exit``, else a detail with command, code and output; at the limit its process
    group is killed whole, so nothing it started outlives the check. :meth:`kill` ends it
    unread. Its output is read from its start by a thread of its own (:func:`_drain`), so a
    command started before the engine's own checks never waits on a full pipe while they run."""

    def __init__(self, argv: List[str], cwd: str, timeout: float, expect_exit: int = 0,
                 display: Optional[str] = None, stdin: Optional[bytes] = None) -> None:
        import subprocess  # here: a command that runs no process (a status) does not load it

        self.shown = display or " ".join(shlex.quote(a) for a in argv)
        self.timeout, self.expect_exit, self.stdin = timeout, expect_exit, stdin
        # one fed on stdin waits for its input, given by finish: its limit counts from then
        self.deadline: Optional[float] = time.monotonic() + timeout if stdin is None else None
        self.failed: Optional[str] = None
        self.proc: "Optional[subprocess.Popen[bytes]]" = None
        self.kept = bytearray()  # the output's tail (KEEP bytes), appended by the reader only
        self.reader: Optional[threading.Thread] = None
        try:
            self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=child_env(),
                                         start_new_session=True)
        except OSError as exc:
            self.failed = "command: %s\ncould not run: %s" % (self.shown, exc.strerror or exc)
            return
        self.reader = threading.Thread(target=_drain, args=(self.proc.stdout, self.kept),
                                       name="patchkit-check-output", daemon=True)
        self.reader.start()

    def finish(self) -> Optional[str]:
        proc, reader = self.proc, self.reader
        if proc is None or reader is None:
            return self.failed
        deadline = self.deadline if self.deadline is not None else time.monotonic() + self.timeout
        # a command that ended while the engine ran its own checks is not late for that
        until = time.monotonic() + max(deadline - time.monotonic(), 0.001 if proc.poll() is None else 5.0)
        try:
            done = _feed(proc, self.stdin or b"", until) and _ended(proc, reader, until)
            if not done:
                _kill_group(proc)
                reap(proc)
                reader.join(5)  # what it wrote before the limit (a process that left the
                # group may hold the pipe: the reader then ends with it, on its own)
        except BaseException:
            self.kill()
            raise
        out = _tail(bytes(self.kept).decode("utf-8", "replace"))
        if not done:
            return "command: %s\n%s\noutput:\n%s" % (self.shown, timed_out(self.timeout), out)
        if proc.returncode == self.expect_exit:
            return None
        return "command: %s\nexit code: %d (expected %d)\noutput:\n%s" % (
            self.shown, proc.returncode, self.expect_exit, out)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            _kill_group(self.proc)
            reap(self.proc)  # a signal may have cut a wait short, its wait lock held
        if self.proc is not None and self.proc.stdin is not None:
            with suppress(OSError):  # unsent input of a command that is gone
                self.proc.stdin.close()


#: The bytes of a command's output kept while it runs: its tail, all a result shows of it
#: (OUTPUT_LIMIT characters), so a check that prints gigabytes costs no memory for them.
KEEP = 16 * OUTPUT_LIMIT


def _drain(pipe: Any, kept: bytearray) -> None:
    """Read a command's output to its end into ``kept``, only the last :data:`KEEP` bytes
    (``communicate`` would hold all of it), then close the pipe: the reader owns it."""
    try:
        fd = pipe.fileno()
        chunk = os.read(fd, 1 << 16)
        while chunk:
            kept += chunk
            del kept[:max(len(kept) - KEEP, 0)]
            chunk = os.read(fd, 1 << 16)
    except OSError:  # nothing more to read
        pass
    finally:
        with suppress(OSError):
            pipe.close()


def _feed(proc: "subprocess.Popen[bytes]", data: bytes, until: float) -> bool:
    """Give the command ``data`` on stdin and close it; False at ``until`` with some unsent
    (a command that does not read its input)."""
    import select

    assert proc.stdin is not None  # started with a PIPE
    offset, fd = 0, proc.stdin.fileno()
    try:
        while offset < len(data):
            left = until - time.monotonic()
            if left <= 0:
                return False
            if select.select([], [fd], [], left)[1]:
                # at most PIPE_BUF: a write the pipe said it has room for never blocks
                offset += os.write(fd, data[offset:offset + select.PIPE_BUF])
    except BrokenPipeError:  # it stopped reading: what it read is its answer
        pass
    finally:
        with suppress(OSError):
            proc.stdin.close()
    return True


def _ended(proc: "subprocess.Popen[bytes]", reader: threading.Thread, until: float) -> bool:
    """Whether the command exited and its output was read to its end by ``until``. The reader
    is waited for first: the end of the output (the command exiting closes it) wakes this
    thread at once, where ``Popen.wait`` with a time limit polls, sleeping up to 50 ms between
    looks, and so could add most of that to a check that takes a tenth of a second."""
    import subprocess

    reader.join(max(until - time.monotonic(), 0))
    if reader.is_alive():
        return False
    try:
        proc.wait(max(until - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        return False
    return True


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    with suppress(OSError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(text: str) -> str:
    if not text:
        return "(none)"
    return text if len(text) <= OUTPUT_LIMIT else "...\n" + text[-OUTPUT_LIMIT:]


def _need(check: Dict[str, Any], key: str, fix: str) -> Any:
    if key not in check or check[key] in (None, ""):
        raise UsageError("fix %s: %s check %r lacks %r; add it to the manifest's check"
                         % (fix, check.get("kind"), check.get("name") or "", key), fix=fix, key=key)
    return check[key]


def expand(values: List[Any], ctx: CheckContext) -> List[str]:
    """Replace ``{python}`` and ``{root:NAME}`` in each argument."""
    table = ctx.roots.placeholders(ctx.python)

    def one(match: "re.Match[str]") -> str:
        token = match.group(0)
        if token not in table:
            raise UsageError("fix %s: placeholder %s names no root of the target (roots: %s); "
                             "fix the check in manifests/%s.toml, or give the target that root "
                             "(--root NAME=PATH)" % (ctx.fix, token, ", ".join(r.name for r in ctx.roots),
                                                     ctx.fix), fix=ctx.fix)
        return table[token]

    return [re.sub(r"\{python\}|\{root:[^}]*\}", one, str(v)) for v in values]


#: The check kinds that run a process of their own; the rest run in the engine.
PROCESS_KINDS = ("bash-syntax", "python-import", "python-script", "command")
#: The checks that only read one file's bytes: a dry run asks them of the files it would write.
CONTENT_KINDS = ("grep", "sha256", "python-syntax")


class Pending:
    """A process check, started: :meth:`result` waits for its command and gives the check's
    result; :meth:`kill` ends the command unread (an interrupt, a failing check beside it)."""

    def __init__(self, started: Started, make: Callable[[Optional[str]], Dict[str, Any]]) -> None:
        self.started, self.make = started, make

    def result(self) -> Dict[str, Any]:
        return self.make(self.started.finish())

    def kill(self) -> None:
        self.started.kill()


def run_check(check: Dict[str, Any], ctx: CheckContext) -> Dict[str, Any]:
    out = _begin(check, ctx)
    return out.result() if isinstance(out, Pending) else out


def run_checks(jobs: Sequence[Tuple[Dict[str, Any], CheckContext]]) -> List[Dict[str, Any]]:
    """:func:`run_check` of each ``(check, context)``, the results in the jobs' order. The
    first check that runs a process (a script, a command, ``bash -n``, an import) is started
    before the checks the engine runs itself and waited for after them, so the two overlap;
    any further process checks run after it, one at a time, in order, as commands a user
    wrote may share a port or a file. Checks only read the target (docs/design.md), so none
    sees another's effect. An exception ends the started command before it propagates."""
    first = next((i for i, (check, _) in enumerate(jobs) if check.get("kind") in PROCESS_KINDS), None)
    if first is None:
        return [run_check(check, ctx) for check, ctx in jobs]
    out: List[Optional[Dict[str, Any]]] = [None] * len(jobs)
    started = _begin(*jobs[first])
    try:
        for i, (check, ctx) in enumerate(jobs):
            if i != first and check.get("kind") not in PROCESS_KINDS:
                out[i] = run_check(check, ctx)
        out[first] = started.result() if isinstance(started, Pending) else started
    finally:
        if isinstance(started, Pending):
            started.kill()  # nothing when it was waited for
    return [done if done is not None else run_check(*jobs[i]) for i, done in enumerate(out)]


def _begin(check: Dict[str, Any], ctx: CheckContext) -> Dict[str, Any] | Pending:
    """The check's result, or, for a process check, its command started (:class:`Pending`)."""
    kind = str(check.get("kind", ""))
    if kind not in CHECK_KINDS:
        raise UsageError("fix %s: unknown check kind %r; use one of %s"
                         % (ctx.fix, kind, ", ".join(CHECK_KINDS)), fix=ctx.fix, kind=kind)
    limit = _timeout(check, ctx.fix)
    start = time.monotonic()
    try:
        if kind.startswith("git-"):
            from . import gitcli

            try:
                with gitcli.deadline(limit):
                    out = _RUNNERS[kind](check, ctx)
            except gitcli.DeadlinePassed:
                raise TimedOut(str(check.get("root") or ""), check.get("name") or "%s check" % kind)
        else:
            out = _RUNNERS[kind](check, ctx)
    except TimedOut as exc:
        return result(kind, str(exc.args[1]), False, timed_out(limit), str(exc.args[0]))
    if isinstance(out, Pending):
        return out
    one_pass = kind in ("sha256", "python-syntax") or (kind == "grep" and not check.get("regex"))
    if one_pass and out["ok"] and time.monotonic() - start > limit:
        out = dict(out, ok=False, detail="%s; but %s" % (out["detail"], timed_out(limit)))
    return out


def _timeout(check: Dict[str, Any], fix: str) -> float:
    value = check.get("timeout")
    if value is None:
        return CHECK_TIMEOUTS[str(check["kind"])]
    if not is_timeout(value):
        raise UsageError("fix %s: %s check %r has timeout %r; give a number of seconds above 0"
                         % (fix, check.get("kind"), check.get("name") or "", value), fix=fix)
    return float(value)


def worker_source() -> str:
    """The regex worker's program: :mod:`regexworker`'s own source (from the file, or from the
    agent's in-memory sources on a host, through the module's loader)."""
    import inspect  # here: only an engine that runs a regex grep needs it

    from . import regexworker

    return inspect.getsource(regexworker)


_local = threading.local()  # one worker per engine thread, started by its first job


def _ask(job: Dict[str, Any], data: bytes, timeout: float, where: str, name: str) -> Dict[str, Any]:
    proc = getattr(_local, "worker", None)
    if proc is None:
        import subprocess  # here: a command that runs no process (a status) does not load it

        proc = _local.worker = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", worker_source()], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env())
    head = json.dumps(dict(job, size=len(data), timeout=timeout)).encode("ascii") + b"\n"
    assert proc.stdin is not None and proc.stdout is not None  # started with both PIPEs
    try:
        proc.stdin.write(head + data)
        proc.stdin.flush()
        line = proc.stdout.readline()
    except OSError:
        line = b""
    if line.endswith(b"\n"):
        return json.loads(line)
    code = close_worker()
    if code == -signal.SIGALRM:
        raise TimedOut(where, name)
    raise UsageError("the check worker (%s) ended with exit code %s while running %s on %s"
                     % (sys.executable, code, name, where), where=where)


def close_worker() -> Optional[int]:
    """End this thread's worker process, if a check started one; its exit code."""
    proc, _local.worker = getattr(_local, "worker", None), None
    if proc is None:
        return None
    if proc.poll() is None:
        proc.kill()
    for pipe in (proc.stdin, proc.stdout):
        with suppress(OSError):  # unsent bytes of a job to a worker that is gone
            pipe.close()
    return proc.wait()


def _file(check: Dict[str, Any], ctx: CheckContext):
    root, path = str(_need(check, "root", ctx.fix)), str(_need(check, "path", ctx.fix))
    try:
        ctx.roots.resolve(root, path)
    except UnsafePathError as err:  # the path comes from the manifest's check, not a patch
        raise UnsafePathError(
            "fix %s: %s check %r: %s. Fix the path in the manifest's check (manifests/%s.toml): it "
            "must be relative to root %s and stay inside it"
            % (ctx.fix, check.get("kind"), check.get("name") or "", err.message, ctx.fix, root),
            **dict(err.details, fix=ctx.fix)) from None
    return root, ctx.roots.where(root, path), ctx.read(root, path)


def _grep(check: Dict[str, Any], ctx: CheckContext) -> Dict[str, Any]:
    root, where, data = _file(check, ctx)
    pattern = str(_need(check, "pattern", ctx.fix))
    name = check.get("name") or "grep %r in %s" % (pattern, where)
    if data is None:
        return result("grep", name, False, "%s does not exist" % where, where)
    if check.get("regex"):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError("fix %s: grep check %r has an invalid regex %r: %s"
                             % (ctx.fix, name, pattern, exc), fix=ctx.fix) from None
        answer = _ask({"op": "grep", "pattern": pattern}, data, _timeout(check, ctx.fix), where, name)
        if "failed" in answer:
            return result("grep", name, False, "%r in %s: %s" % (pattern, where, answer["failed"]), where)
        matches = answer["lines"]
    else:
        matches = [i for i, ln in enumerate(split_lines(decode(data)), 1) if pattern in ln]
    where_found = "lines %s" % ", ".join(map(str, matches[:10])) if matches else "no line"
    ok = grep_holds(check, len(matches))
    if check.get("count") is not None:
        detail = "%d matching lines (%s), expected %d" % (len(matches), where_found, int(check["count"]))
    else:
        want = bool(check.get("present", True))
        detail = "%s %s; expected it %s" % ("found at" if matches else "not found:", where_found,
                                            "present" if want else "absent")
    if not ok and check.get("name"):
        # A label says why the check exists; a failure must also say what was looked for.
        detail = "%r in %s: %s" % (pattern, where, detail)
    return result("grep", name, ok, detail, where)


def _sha256(check: Dict[str, Any], ctx: CheckContext) -> Dict[str, Any]:
    root, where, data = _file(check, ctx)
    want = str(_need(check, "sha256", ctx.fix)).lower()
    name = check.get("name") or "sha256 of %s" % where
    if data is None:
        return result("sha256", name, False, "%s does not exist" % where, where)
    have = sha256_bytes(data)
    return result("sha256", name, have == want, "sha256 %s, expected %s" % (have, want), where)


def _python_syntax(check: Dict[str, Any], ctx: CheckContext) -> Dict[str, Any]:
    root, where, data = _file(check, ctx)
    name = check.get("name") or "python syntax of %s" % where
    if data is None:
        return result("python-syntax", name, False, "%s does not exist" % where, where)
    import warnings

    try:  # compiled as an import compiles it: ast.parse takes a module-level `return`
        with warnings.catch_warnings():  # what Python only warns about is not a failure
            warnings.simplefilter("ignore")
            compile(data, where, "exec", dont_inherit=True)
    except Exception as exc:  # SyntaxError; ValueError (NUL bytes), RecursionError (nesting)
        detail = ("line %s: %s" % (exc.lineno, exc) if isinstance(exc, SyntaxError)
                  else "%s: %s" % (type(exc).__name__, exc))
        return result("python-syntax", name, False, detail, where)
    return result("python-syntax", name, True, "parses", where)


def _bash_syntax(check: Dict[str, Any], ctx: CheckContext) -> Dict[str, Any] | Pending:
    root, where, data = _file(check, ctx)
    name = check.get("name") or "bash syntax of %s" % where
    if data is None:
        return result("bash-syntax", name, False, "%s does not exist" % where, where)
    started = Started(["bash", "-n"], ctx.roots.get(root).path, _timeout(check, ctx.fix),
                      display="bash -n %s" % where, stdin=data)
    return Pending(started, lambda failure: result("bash-syntax", name, failure is None,
                                                   failure or "parses", where))


def _python_import(check: Dict[str, Any], ctx: CheckContext) -> Pending:
    module = str(_need(check, "module", ctx.fix))
    root = ctx.roots.get(str(_need(check, "root", ctx.fix)))
    sys_path = str(check.get("sys_path") or ("." if root.layout == PACKAGE else "python"))
    entry = ctx.roots.resolve(root.name, sys_path) if sys_path not in (".", "") else root.path
    where = "%s:%s" % (root.name, module)
    name = check.get("name") or "import %s" % module
    source = "import sys, importlib; sys.path.insert(0, sys.argv[1]); importlib.import_module(sys.argv[2])"
    started = Started([ctx.python, "-c", source, entry, module], root.path, _timeout(check, ctx.fix),
                      display="%s -c 'import %s' (sys.path[0] = %s)" % (ctx.python, module, entry))
    return Pending(started, lambda failure: result("python-import", name, failure is None,
                                                   failure or "imported", where))


def _python_script(check: Dict[str, Any], ctx: CheckContext) -> Pending:
    script = str(_need(check, "script", ctx.fix))
    if script not in ctx.scripts:
        raise UsageError("fix %s: check script %s is not shipped with the request; add it under "
                         "patches/%s/%s" % (ctx.fix, script, ctx.fix, script), fix=ctx.fix, script=script)
    root = ctx.roots.get(str(_need(check, "root", ctx.fix)))
    args = expand(list(check.get("args") or []), ctx)
    name = check.get("name") or "script %s" % script
    started = Started([ctx.python, "-c", ctx.scripts[script]] + args, root.path,
                      _timeout(check, ctx.fix),
                      display=" ".join([ctx.python, script] + [shlex.quote(a) for a in args]))
    # where the script is: the catalog's fix directory, not the root it runs in
    return Pending(started, lambda failure: result("python-script", name, failure is None,
                                                   failure or "exit 0", "patches/%s/%s" % (ctx.fix, script)))


def _command(check: Dict[str, Any], ctx: CheckContext) -> Pending:
    argv = expand(list(_need(check, "argv", ctx.fix)), ctx)
    root = ctx.roots.get(str(_need(check, "root", ctx.fix)))
    expect = int(check.get("expect_exit", 0) or 0)
    name = check.get("name") or " ".join(shlex.quote(a) for a in argv)
    started = Started(argv, root.path, _timeout(check, ctx.fix), expect_exit=expect)
    return Pending(started, lambda failure: result("command", name, failure is None,
                                                   failure or "exit %d" % expect, root.name))


def _git_checkout(check: Dict[str, Any], ctx: CheckContext):
    from .gitops import checkout_of

    root = ctx.roots.get(str(_need(check, "root", ctx.fix)))
    co = checkout_of(root.path)
    if co is None:
        return root, None, "root %s (%s) is not a git checkout" % (root.name, root.path)
    if co.head() is None:
        return root, None, "root %s has no commit at HEAD" % root.name
    return root, co, ""


def _git_contains(check: Dict[str, Any], ctx: CheckContext) -> Dict[str, Any]:
    want = bool(check.get("present", True))
    what = ("commit %s" % check["commit"] if check.get("commit")
            else "the commit of fix %s" % _need(check, "fix", ctx.fix))
    name = check.get("name") or "HEAD %s %s" % ("contains" if want else "does not contain", what)
    root, co, why = _git_checkout(check, ctx)
    if co is None:
        return result("git-contains", name, False, why, root.name)
    head = co.head() or ""
    found: List[str] = []  # "abbrev subject" of the commit found
    if check.get("commit"):
        sha = co.rev(str(check["commit"]))
        if sha is not None and co.is_ancestor(sha, head):
            found = [co.describe(sha)]
        elif sha is None and want:
            return result("git-contains", name, False, "commit %s does not exist in %s; fetch it or "
                          "check the id" % (check["commit"], co.top), root.name)
    else:
        paths = [co.rel(root.mapped(p)) for p in check.get("fix_paths") or []]
        found = [c.title for c in co.find_by_patch_id(str(check.get("series") or ""), paths)[1]]
    has = bool(found)
    detail = ("HEAD %s contains %s: %s" % (head[:12], what, found[0]) if has
              else "%s is not in the history of HEAD (%s)" % (what, head[:12]))
    if has != want:
        detail += "; the fix needs it %s" % ("there: apply or cherry-pick it first" if want
                                             else "absent: revert it first")
    return result("git-contains", name, has == want, detail, root.name)


def _git_descends_from(check: Dict[str, Any], ctx: CheckContext) -> Dict[str, Any]:
    ref = str(check.get("tag") or _need(check, "commit", ctx.fix))
    what = "tag %s" % ref if check.get("tag") else "commit %s" % ref
    name = check.get("name") or "HEAD is at or descends from %s" % what
    root, co, why = _git_checkout(check, ctx)
    if co is None:
        return result("git-descends-from", name, False, why, root.name)
    sha = co.rev(ref)
    head = co.head() or ""
    if sha is None:
        return result("git-descends-from", name, False, "%s does not exist in %s; fetch it (git "
                      "fetch --tags) or fix the name" % (what, co.top), root.name)
    if co.is_ancestor(sha, head):
        at = "is at" if sha == head else "descends from"
        return result("git-descends-from", name, True, "HEAD %s %s %s" % (head[:12], at, what), root.name)
    return result("git-descends-from", name, False, "HEAD %s (%s) does not descend from %s (%s); "
                  "check out a branch based on it" % (head[:12], co.describe(head), what, sha[:12]),
                  root.name)


Runner = Callable[[Dict[str, Any], CheckContext], "Dict[str, Any] | Pending"]
_RUNNERS: Dict[str, Runner] = {"grep": _grep, "sha256": _sha256, "python-syntax": _python_syntax,
                               "bash-syntax": _bash_syntax, "python-import": _python_import,
                               "python-script": _python_script, "command": _command,
                               "git-contains": _git_contains,
                               "git-descends-from": _git_descends_from}
