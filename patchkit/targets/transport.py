"""Run the engine on a host over one OpenSSH session (the only module that runs ``ssh``).

One call to :func:`run_engine` is one ``ssh`` process and one session:

    ssh [options] [-p port] [user@]host -- <python> -c <agent loader>

The remote command is fixed: it holds the interpreter name and a loader for the agent, never
a value from a manifest or request. Everything else travels on stdin as one length-prefixed
JSON payload (``<decimal byte count>\\n{"modules": {dotted name: source}, "request": {...}}``).
The agent (:data:`AGENT`, standard library only, Python 3.8+) ignores SIGHUP and SIGPIPE so
that a dropped connection cannot stop a transaction half way, and then talks with the client:

1. agent: :data:`STARTED_MARKER` (the interpreter runs); it reads the whole payload;
2. agent: :data:`READY_MARKER` (the request is on the host); it waits for one line;
3. client: :data:`GO_LINE`, then end of input; without that exact line the agent exits and
   runs nothing;
4. agent: builds ``patchkit``, ``patchkit.errors`` and ``patchkit.engine[.*]`` in memory
   from the sources, runs ``patchkit.engine.run(request)`` and prints :data:`RESULT_MARKER`
   followed by the result JSON.

Step 3 is the line between the two ways a session can end without a result: before the
client sent :data:`GO_LINE`, nothing ran on the host (:class:`~patchkit.errors.SessionFailed`
and the other classes of a failed start); after it, the host may have changed the target and
finishes or leaves a journal (:class:`~patchkit.errors.ConnectionLost`). The price is one
round trip between the payload and the run.

ssh's failures are told apart by its exit code (255 is ssh's own) and its stderr, and raised
as the :mod:`patchkit.errors` remote classes, each message naming the host.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import os
import re
import shlex
import select
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import (
    AuthenticationFailed,
    ConnectionLost,
    HostKeyError,
    HostUnreachable,
    RemoteError,
    RemotePythonMissing,
    SessionFailed,
    UsageError,
)

STARTED_MARKER = b"\n--patchkit-agent-started-1--\n"
READY_MARKER = b"\n--patchkit-agent-ready-1--\n"
GO_LINE = b"run\n"
RESULT_MARKER = b"\n--patchkit-agent-result-1--\n"
DEFAULT_CONNECT_TIMEOUT = 15
_SSH_FAILED = 255
_TOO_OLD = "patchkit-agent: Python 3.8 or newer is required, found"

# The agent is exec'd by a one-line loader (see remote_command), so that any login shell,
# including csh, passes it through untouched.
_AGENT_BODY = r'''
import importlib.abc, importlib.util, json, linecache, os, signal, sys, traceback

signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
result_out = os.fdopen(os.dup(1), "wb")
null_fd = os.open(os.devnull, os.O_RDWR)
os.dup2(null_fd, 1)  # stray output (ours or a child's) cannot corrupt the result channel
sys.stdout = open(os.devnull, "w")


class QuietStderr:
    """Diagnostics go to ssh while it is connected and nowhere once it is gone."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass
        return len(text)

    def flush(self):
        pass


sys.stderr = QuietStderr(sys.stderr)


def emit(data):
    try:
        result_out.write(data)
        result_out.flush()
    except (OSError, ValueError):
        pass  # the client is gone; the state on the host tells the next run what happened


emit(STARTED)
stdin = sys.stdin.buffer
header = stdin.readline(32)
if not header.strip().isdigit():
    sys.exit(3)
size = int(header)
chunks, got = [], 0
while got < size:
    chunk = stdin.read(size - got)
    if not chunk:
        sys.exit(3)  # the payload was cut short: run nothing
    chunks.append(chunk)
    got += len(chunk)
payload = json.loads(b"".join(chunks).decode("utf-8"))
emit(READY)
if stdin.readline(16) != GO:
    sys.exit(3)  # the client never said go (it is gone, or gave up): run nothing
os.dup2(null_fd, 0)
request = payload["request"]
sources = payload["modules"]
packages = {"patchkit", "patchkit.engine"}
for name in sources:
    parts = name.split(".")
    packages.update(".".join(parts[:i]) for i in range(1, len(parts)))


class Loader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves patchkit's modules from the payload so relative imports work as installed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in sources and fullname not in packages:
            return None
        spec = importlib.util.spec_from_loader(fullname, self, is_package=fullname in packages)
        spec.origin = self.filename(fullname)
        spec.has_location = True
        return spec

    def filename(self, fullname):
        suffix = "/__init__.py" if fullname in packages else ".py"
        return "<patchkit-agent>/" + fullname.replace(".", "/") + suffix

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = sources.get(module.__name__, "")
        filename = self.filename(module.__name__)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), module.__dict__)


sys.meta_path.insert(0, Loader())
try:
    import patchkit.engine
    result = patchkit.engine.run(request)
except BaseException as exc:  # the client must always get a result it can re-raise
    error = getattr(exc, "to_dict", None)
    if callable(error) and getattr(exc, "details", None) is not None:
        error = error()
    else:
        error = {
            "type": "InternalError",
            "message": "the patchkit engine failed on the host: %s: %s" % (type(exc).__name__, exc),
            "details": {"traceback": traceback.format_exc()},
        }
    result = {"format": 1, "op": request.get("op"), "ok": False,
              "dry_run": bool(request.get("dry_run")), "recovered": [], "fixes": [],
              "status": None, "error": error}
emit(RESULT + json.dumps(result).encode("ascii") + b"\n")
'''
AGENT = (
    f"STARTED = {STARTED_MARKER!r}\nREADY = {READY_MARKER!r}\nGO = {GO_LINE!r}\n"
    f"RESULT = {RESULT_MARKER!r}\n{_AGENT_BODY}"
)


@dataclass(frozen=True)
class SshSpec:
    """How to reach a host: what ``ssh`` is given besides the remote command.

    ``options`` are extra ``ssh`` arguments, passed verbatim before the destination (for
    example ``("-o", "ProxyJump=bastion")``). ssh keeps the first value it sees for a setting,
    so the user's options beat patchkit's defaults (``BatchMode=yes``, keep-alives and a
    connect timeout), while an explicit ``connect_timeout`` beats both.
    """

    host: str
    user: str | None = None
    port: int | None = None
    options: tuple[str, ...] = field(default_factory=tuple)
    program: str = "ssh"
    connect_timeout: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(self.options))
        check_host(self.host)
        if self.user is not None and not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*\$?", self.user):
            raise UsageError(f"invalid SSH user name {self.user!r}: use a plain login name")
        if self.port is not None and (
            isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 < self.port < 65536
        ):
            raise UsageError(f"invalid SSH port {self.port!r} for {self.host}: use 1-65535")
        if not all(isinstance(o, str) for o in self.options):
            raise UsageError(f"ssh options for {self.host} must be strings: {self.options!r}")
        if not self.program:
            raise UsageError(f"empty ssh program for {self.host}")
        if self.connect_timeout is not None and not self.connect_timeout > 0:
            raise UsageError(f"connect timeout for {self.host} must be positive")

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    @property
    def url(self) -> str:
        """The ``ssh://`` form users write, for messages and descriptions."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"ssh://{user}{host}{port}"


def check_host(host: str) -> None:
    """Refuse host names ssh could read as an option or that no resolver would accept."""
    if not isinstance(host, str) or not re.fullmatch(r"[A-Za-z0-9_.:%-]+", host) or host[0] in "-.":
        raise UsageError(f"invalid SSH host {host!r}: use a host name, an IP address or an ssh alias")


@functools.lru_cache(maxsize=1)
def _installed_modules() -> tuple[tuple[str, str], ...]:
    base = Path(__file__).resolve().parent.parent
    found = [("patchkit.errors", (base / "errors.py").read_text(encoding="utf-8"))]
    engine = base / "engine"
    for path in sorted(engine.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(["patchkit", *parts]), path.read_text(encoding="utf-8")))
    return tuple(found)


def engine_modules() -> dict[str, str]:
    """The sources shipped to hosts: ``patchkit.errors`` and every ``patchkit.engine`` module."""
    return dict(_installed_modules())


def remote_command(python: str) -> str:
    """The command line the remote user's shell runs; it holds no request data."""
    if not python or any(c in python for c in "\0\n\r"):
        raise UsageError(f"invalid remote Python interpreter {python!r}: give a command name or path")
    encoded = base64.b64encode(AGENT.encode("utf-8")).decode("ascii")
    loader = (  # double quotes only, so the single-quoted word survives any login shell
        'import sys;sys.path[:1]==[""] and sys.path.pop(0);'
        f'sys.version_info<(3,8) and sys.exit({json.dumps(_TOO_OLD)}+" "+sys.version.split()[0]);'
        f'import base64;exec(base64.b64decode("{encoded}"))'
    )
    return " ".join(shlex.quote(word) for word in (python, "-c", loader))


def ssh_argv(spec: SshSpec, command: str) -> list[str]:
    """The full ``ssh`` command line for one session running ``command`` on the host."""
    argv = [spec.program]
    if spec.connect_timeout is not None:
        argv += ["-o", f"ConnectTimeout={math.ceil(spec.connect_timeout)}"]
    argv += list(spec.options)
    argv += [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={DEFAULT_CONNECT_TIMEOUT}",
        "-o", "ServerAliveInterval=15",
        "-o", "ServerAliveCountMax=4",
    ]
    argv.append("-T")  # last, so it beats a user's -t: a pty would mangle the payload on stdin
    if spec.port is not None:
        argv += ["-p", str(spec.port)]
    return [*argv, spec.destination, "--", command]


def run_engine(
    spec: SshSpec,
    request: Mapping[str, Any],
    *,
    python: str = "python3",
    modules: Mapping[str, str] | None = None,
    timeout: float | None = None,
    status_command: str = "patchkit status",
) -> dict[str, Any]:
    """Run ``patchkit.engine.run(request)`` on the host in one session; return its result.

    The result's ``error`` is returned as the engine wrote it (the caller re-raises it), so
    only transport failures raise here. ``status_command`` is the command the user runs to
    see what a run cut off after it reached the engine did (named in that error's message).
    """
    sources = engine_modules() if modules is None else dict(modules)
    payload = json.dumps({"modules": sources, "request": dict(request)}).encode("ascii")
    command = remote_command(python)
    argv = ssh_argv(spec, command)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as exc:  # not found or not executable: nothing was sent anywhere
        raise UsageError(
            f"cannot run the ssh program {spec.program!r} for {spec.url} ({exc.strerror}): install "
            "the OpenSSH client or set ssh_program to an executable",
            host=spec.host,
        ) from exc
    session = _Session(proc, str(len(payload)).encode("ascii") + b"\n" + payload, timeout)
    try:
        session.run()
    except BaseException as exc:
        session.close()
        if session.went and not isinstance(exc, Exception):  # an interrupt (^C, a signal)
            raise ConnectionLost(
                f"patchkit was interrupted after the request reached the engine on {spec.url}; "
                f"the session was closed. {_may_have_run(status_command)}",
                **_details(spec, argv, command, None, session.stderr),
            ) from exc
        raise
    result = _parse_result(session.stdout)
    if result is not None:
        return result  # complete, even if ssh was slow to exit after it
    if session.timed_out:
        if session.went:
            raise ConnectionLost(
                f"no result from {spec.url} within {timeout:g} s after the request reached the "
                f"engine there; the session was closed. {_may_have_run(status_command)}",
                **_details(spec, argv, command, None, session.stderr),
            )
        raise SessionFailed(
            f"no answer from the patchkit agent on {spec.url} within {timeout:g} s; the session "
            f"was closed before the request reached the engine, so {_NOTHING_RAN}",
            **_details(spec, argv, command, None, session.stderr),
        )
    return_code = proc.returncode if proc.returncode is not None else -1
    raise classify_failure(spec, python, return_code, session.stderr, session.stdout, argv,
                           command, went=session.went, status_command=status_command)


class _Session:
    """One ssh process's conversation with the agent: the payload in, ``GO_LINE`` once the
    agent says ``READY_MARKER``, everything it prints out. ``went``: ``GO_LINE`` may have
    reached the agent (it was handed to ssh), so the engine may have run."""

    def __init__(self, proc: subprocess.Popen[bytes], payload: bytes, timeout: float | None) -> None:
        self.proc, self.payload = proc, payload
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.went = self.timed_out = False
        self.stdout = b""
        self._stderr: list[bytes] = []

    @property
    def stderr(self) -> bytes:
        return b"".join(self._stderr)

    def _left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def run(self) -> None:
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        writer = threading.Thread(target=self._write, args=(self.payload,), daemon=True)
        reader = threading.Thread(target=self._drain_stderr, daemon=True)
        writer.start()
        reader.start()
        out = proc.stdout.fileno()
        chunks: list[bytes] = []
        seen = b""  # the tail of stdout, to find READY_MARKER across reads
        while True:
            left = self._left()
            if left is not None and left <= 0:
                self.timed_out = True
                self.close()
                break
            ready, _, _ = select.select([out], [], [], left)
            if not ready:
                continue
            chunk = os.read(out, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if not self.went:
                seen = seen[-len(READY_MARKER):] + chunk
                if READY_MARKER in seen:
                    writer.join(self._left())  # the agent has read the whole payload
                    self._go()
        self.stdout = b"".join(chunks)
        try:
            proc.wait(self._left())
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.close()
        reader.join(self._left())

    def _write(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            pass  # ssh is gone: its exit code and stderr say why

    def _go(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(GO_LINE)
            self.went = True
            stdin.flush()
        except (OSError, ValueError):
            self.went = False  # a pipe ssh has left takes no byte: the line never went
        try:
            stdin.close()
        except OSError:
            pass

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):  # type: ignore[union-attr]
            self._stderr.append(chunk)

    def close(self) -> None:
        """End the session: kill our ssh (the agent, if it was told to run, goes on)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


_NOTHING_RAN = "nothing ran on the host: the target is unchanged and the command is safe to run again."


def _may_have_run(status_command: str) -> str:
    return (
        "The run may have completed on the host (a lost connection does not stop it there) or "
        "have been killed part way through writing; either way the next patchkit run on this "
        "target finishes or undoes it from its journal. "
        f"Run `{status_command}` to see which: it recovers an interrupted run and reports the "
        "fixes' state."
    )


_HOSTKEY_CHANGED = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "has changed and you have requested strict")
_HOSTKEY = ("Host key verification failed", "host key is known for", "No host key is known")
_AUTH = (
    "Permission denied (",
    "Too many authentication failures",
    "No more authentication methods",
    "Authentication failed",
)
_UNREACHABLE = (
    "Could not resolve hostname",
    "Name or service not known",
    "Temporary failure in name resolution",
    "nodename nor servname",
    "No address associated with hostname",
    "Connection refused",
    "Connection timed out",
    "Operation timed out",
    "No route to host",
    "Network is unreachable",
)


def classify_failure(
    spec: SshSpec,
    python: str,
    returncode: int,
    stderr: bytes,
    stdout: bytes,
    argv: list[str],
    command: str,
    *,
    went: bool = True,
    status_command: str = "patchkit status",
) -> RemoteError:
    """Name the way a session ended without a result, from whether the agent was told to run
    (``went``), ssh's exit code and stderr."""
    text = stderr.decode("utf-8", "replace")
    where = spec.url
    details = _details(spec, argv, command, returncode, stderr)
    said = _tail(text)
    how = ("was killed" if returncode < 0 else "was closed (ssh exit code 255)"
           if returncode == _SSH_FAILED else f"ended with exit code {returncode}")
    if went:
        return ConnectionLost(
            f"the session to {where} {how} after the request reached the engine there, before "
            f"its result arrived. {_may_have_run(status_command)}"
            + (f" ssh said: {said}" if said else ""),
            **details,
        )
    started = STARTED_MARKER in stdout
    if not started and returncode == _SSH_FAILED:
        if any(s in text for s in _HOSTKEY_CHANGED):
            return HostKeyError(
                f"the host key of {where} does not match the one in known_hosts: the host was "
                "reinstalled or someone is intercepting the connection. Check the new key's "
                "fingerprint with the host's administrator, then replace the old entry in "
                f"known_hosts (ssh-keygen -R) and retry. ssh said: {said}",
                **details,
            )
        if any(s in text for s in _HOSTKEY):
            return HostKeyError(
                f"the host key of {where} is not in known_hosts. Check its fingerprint with the "
                "host's administrator and add it to known_hosts (for example connect once with "
                f"ssh and compare the fingerprint it shows), then retry. ssh said: {said}",
                **details,
            )
        if any(s in text for s in _AUTH):
            return AuthenticationFailed(
                f"SSH authentication to {where} failed: check the user name, that your key is "
                f"in the host's authorized_keys and loaded (ssh-agent or IdentityFile). ssh said: {said}",
                **details,
            )
        if any(s in text for s in _UNREACHABLE) or "timed out" in text:
            return HostUnreachable(
                f"cannot reach {where}: check the host name, port and network. ssh said: {said}",
                **details,
            )
    if not started and (_TOO_OLD in text):
        return RemotePythonMissing(
            f"the Python on {where} ({python}) is too old: patchkit needs 3.8 or newer; "
            f"pass --python (or set python) to a newer interpreter. {said}",
            **details,
        )
    if not started and returncode in (126, 127):
        return RemotePythonMissing(
            f"no Python interpreter {python!r} on {where}: install Python 3.8+ there or pass "
            f"--python (or set python in patchkit.toml) to its path. The host said: {said}",
            **details,
        )
    stage = ("before the request reached the patchkit engine" if started
             else "before the patchkit agent started")
    who = "ssh" if returncode == _SSH_FAILED else "the host"
    return SessionFailed(
        f"the session to {where} {how} {stage} there, so {_NOTHING_RAN} "
        f"{who} said: {said or '(nothing)'}",
        **details,
    )


def _parse_result(stdout: bytes) -> dict[str, Any] | None:
    at = stdout.rfind(RESULT_MARKER)
    if at < 0:
        return None
    line = stdout[at + len(RESULT_MARKER):].split(b"\n", 1)[0]
    try:
        result = json.loads(line.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None  # cut short: the connection dropped while the result was on its way
    return result if isinstance(result, dict) else None


def _tail(text: str, lines: int = 6) -> str:
    kept = [ln.strip() for ln in text.replace("\r", "").splitlines() if ln.strip().strip("@")]
    return " / ".join(kept[-lines:])


def _details(
    spec: SshSpec, argv: list[str], command: str, returncode: int | None, stderr: bytes
) -> dict[str, Any]:
    shown = [w if w != command else f"{command.split(' ', 1)[0]} -c '<patchkit agent>'" for w in argv]
    return {
        "host": spec.host,
        "port": spec.port,
        "user": spec.user,
        "command": shlex.join(shown),
        "exit_code": returncode,
        "stderr": stderr.decode("utf-8", "replace"),
    }
