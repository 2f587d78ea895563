"""Run the engine on a host over one OpenSSH session (the only module that runs ``ssh``).
The engine's sources and the request go to :data:`AGENT` on stdin; it runs nothing until the
client's :data:`GO_LINE`, the go-ahead docs/remote.md describes."""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shlex
import select
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import (AuthenticationFailed, ConnectionLost, HostKeyError, HostUnreachable, RemoteError,
                      RemotePythonMissing, SessionFailed, UsageError)

STARTED_MARKER = b"\n--patchkit-agent-started-1--\n"
READY_MARKER = b"\n--patchkit-agent-ready-1--\n"
GO_LINE = b"run\n"
RESULT_MARKER = b"\n--patchkit-agent-result-1--\n"
DEFAULT_CONNECT_TIMEOUT = 15
_SSH_FAILED = 255
_TOO_OLD = "patchkit-agent: Python 3.8 or newer is required, found"

# Serves the engine's sources from memory and runs it, inside the agent below, which both the
# ssh:// target and the Ansible collection's action plugin (patchkit/fleet/) start on a host: a
# host runs the same engine, through the same agent, however it is reached.
_LOADER = r'''
import importlib.abc, importlib.util, linecache, sys, traceback


def install(sources):
    """Import patchkit's modules from ``sources`` (module name -> source) as if installed."""
    packages = {"patchkit", "patchkit.engine"}
    for name in sources:
        parts = name.split(".")
        packages.update(".".join(parts[:i]) for i in range(1, len(parts)))

    class Loader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path=None, target=None):
            if fullname not in sources and fullname not in packages:
                return None
            package = fullname in packages
            spec = importlib.util.spec_from_loader(fullname, self, is_package=package)
            spec.origin = "<patchkit-agent>/%s%s" % (fullname.replace(".", "/"),
                                                     "/__init__.py" if package else ".py")
            spec.has_location = True  # tracebacks name the file and show its lines
            return spec

        def exec_module(self, module):
            source, filename = sources.get(module.__name__, ""), module.__spec__.origin
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            exec(compile(source, filename, "exec"), module.__dict__)

    sys.meta_path.insert(0, Loader())


def run(request):
    """The engine's result for ``request``; a failure to run it at all becomes a result too."""
    try:
        import patchkit.engine
        return patchkit.engine.run(request)
    except BaseException as exc:  # the client must always get a result it can re-raise
        error = getattr(exc, "to_dict", None)
        if callable(error) and getattr(exc, "details", None) is not None:
            error = error()
        else:
            error = {"type": "InternalError", "details": {"traceback": traceback.format_exc()},
                     "message": "the patchkit engine failed on the host: %s: %s" % (type(exc).__name__, exc)}
        return {"format": 1, "op": request.get("op"), "ok": False,
                "dry_run": bool(request.get("dry_run")), "recovered": [], "fixes": [],
                "status": None, "error": error}
'''

# The agent is exec'd by a one-line loader (see remote_command), so that any login shell,
# including csh, passes it through untouched.
_AGENT_BODY = r'''
import json, os, signal, sys, traceback

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
header = stdin.readline(32).strip()
data = stdin.read(int(header)) if header.isdigit() else b""
if not header.isdigit() or len(data) < int(header):
    sys.exit(3)  # no payload, or it was cut short: run nothing
payload = json.loads(data.decode("utf-8"))
emit(READY)
if stdin.readline(16) != GO:
    sys.exit(3)  # the client never said go (it is gone, or gave up): run nothing
os.dup2(null_fd, 0)
request = payload["request"]
install(payload["modules"])
result = run(request)
emit(RESULT + json.dumps(result).encode("ascii") + b"\n")
'''
AGENT = (
    f"STARTED = {STARTED_MARKER!r}\nREADY = {READY_MARKER!r}\nGO = {GO_LINE!r}\n"
    f"RESULT = {RESULT_MARKER!r}\n{_LOADER}\n{_AGENT_BODY}"
)


@dataclass(frozen=True)
class SshSpec:
    """How to reach a host. ``options``: extra ``ssh`` arguments, passed verbatim before the
    destination, so they beat patchkit's defaults (ssh keeps the first value of a setting)."""

    host: str
    user: str | None = None
    port: int | None = None
    options: tuple[str, ...] = ()
    program: str = "ssh"

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(self.options))
        host = self.host  # never something ssh could read as an option, nor no resolver accepts
        if not isinstance(host, str) or not re.fullmatch(r"[A-Za-z0-9_.:%-]+", host) or host[0] in "-.":
            raise UsageError(f"invalid SSH host {host!r}: use a host name, an IP address or an ssh alias")
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


@functools.lru_cache(maxsize=1)
def engine_modules() -> dict[str, str]:
    """The sources shipped to hosts: ``patchkit.errors`` and every ``patchkit.engine`` module
    (read once: the dict is shared, never changed)."""
    package = Path(__file__).resolve().parent.parent
    paths = [package / "errors.py", *sorted((package / "engine").rglob("*.py"))]
    names = (".".join(p.relative_to(package.parent).with_suffix("").parts) for p in paths)
    return {name.removesuffix(".__init__"): path.read_text(encoding="utf-8")
            for name, path in zip(names, paths)}


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
    argv = [spec.program, *spec.options, "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={DEFAULT_CONNECT_TIMEOUT}",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
            "-T"]  # last, so it beats a user's -t: a pty would mangle the payload on stdin
    port = ["-p", str(spec.port)] if spec.port is not None else []
    return [*argv, *port, spec.destination, "--", command]


def agent_payload(request: Mapping[str, Any], modules: Mapping[str, str] | None = None) -> bytes:
    """What :data:`AGENT` reads on stdin before it is told to go: the payload's length on one
    line, then the engine's sources and ``request`` as JSON."""
    sources = engine_modules() if modules is None else dict(modules)
    payload = json.dumps({"modules": sources, "request": dict(request)}).encode("ascii")
    return str(len(payload)).encode("ascii") + b"\n" + payload


def run_engine(spec: SshSpec, request: Mapping[str, Any], *, python: str = "python3",
               modules: Mapping[str, str] | None = None, timeout: float | None = None,
               status_command: str = "patchkit status") -> dict[str, Any]:
    """Run ``patchkit.engine.run(request)`` on the host; return its result, ``error`` included
    (only transport failures raise). ``status_command`` is named in a lost connection's error."""
    session = _Session(spec, python, status_command)
    try:
        session.run(agent_payload(request, modules), timeout)
    except BaseException as exc:
        session.close()
        if session.went and not isinstance(exc, Exception):  # an interrupt (^C, a signal)
            raise ConnectionLost(
                f"patchkit was interrupted after the request reached the engine on {spec.url}; "
                f"the session was closed. {_may_have_run(status_command)}",
                **session.details(None),
            ) from exc
        raise
    result = parse_result(session.stdout)
    if result is not None:
        return result  # complete, even if ssh was slow to exit after it
    raise session.failure(timeout)


class _Session:
    """One ssh process's conversation with the agent. ``went``: ``GO_LINE`` was handed to ssh,
    so the engine may have run."""

    def __init__(self, spec: SshSpec, python: str, status_command: str) -> None:
        self.spec, self.python, self.status_command = spec, python, status_command
        self.command = remote_command(python)
        self.argv = ssh_argv(spec, self.command)
        self.deadline: float | None = None
        self.went = self.timed_out = False
        self.stdout = b""
        self._stderr: list[bytes] = []
        pipe = subprocess.PIPE
        try:
            self.proc = subprocess.Popen(self.argv, stdin=pipe, stdout=pipe, stderr=pipe)
        except OSError as exc:  # not found or not executable: nothing was sent anywhere
            raise UsageError(
                f"cannot run the ssh program {spec.program!r} for {spec.url} ({exc.strerror}): "
                "install the OpenSSH client or set ssh_program to an executable",
                host=spec.host,
            ) from exc

    def _left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def run(self, payload: bytes, timeout: float | None) -> None:
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        self.deadline = None if timeout is None else time.monotonic() + timeout
        writer = threading.Thread(target=self._write, args=(payload,), daemon=True)
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

    def _stdout_text(self) -> str:
        """What the host printed on stdout that is not the agent's own protocol."""
        data = self.stdout
        for marker in (STARTED_MARKER, READY_MARKER):
            data = data.replace(marker, b"\n")
        at = data.find(RESULT_MARKER)
        return (data if at < 0 else data[:at]).decode("utf-8", "replace").strip()

    def details(self, returncode: int | None) -> dict[str, Any]:
        """The error details: where, the command (the agent elided), exit code, ssh's stderr."""
        agent = f"{self.command.split(' ', 1)[0]} -c '<patchkit agent>'"
        return {"host": self.spec.host, "port": self.spec.port, "user": self.spec.user,
                "command": shlex.join(agent if w == self.command else w for w in self.argv),
                "exit_code": returncode, "stderr": b"".join(self._stderr).decode("utf-8", "replace")}

    def failure(self, timeout: float | None) -> RemoteError:
        """The error for a session that ended without a result."""
        where, status_command = self.spec.url, self.status_command
        if self.timed_out and self.went:
            return ConnectionLost(
                f"no result from {where} within {timeout:g} s after the request reached the "
                f"engine there; the session was closed. {_may_have_run(status_command)}",
                **self.details(None),
            )
        if self.timed_out:
            return SessionFailed(
                f"no answer from the patchkit agent on {where} within {timeout:g} s; the session "
                f"was closed before the request reached the engine, so {_NOTHING_RAN}",
                **self.details(None),
            )
        returncode = self.proc.returncode if self.proc.returncode is not None else -1
        details = self.details(returncode)
        text = details["stderr"]
        said = _tail(text)
        out = self._stdout_text()
        if out:  # a host may say why on stdout (a nologin shell: "This account is ...")
            details["stdout"] = out[-4000:]
            said = (f"{said} (stderr) / {_tail(out)} (stdout)" if said else _tail(out))
        how = ("was killed" if returncode < 0 else "was closed (ssh exit code 255)"
               if returncode == _SSH_FAILED else f"ended with exit code {returncode}")
        if self.went:
            return ConnectionLost(
                f"the session to {where} {how} after the request reached the engine there, "
                f"before its result arrived. {_may_have_run(status_command)}"
                + (f" ssh said: {said}" if said else ""),
                **details,
            )
        started = STARTED_MARKER in self.stdout
        if not started and returncode == _SSH_FAILED:
            for signs, error, advice in _SSH_FAILURES:
                if any(sign in text for sign in signs):
                    return error(f"{advice.format(where=where)} ssh said: {said}", **details)
        if not started and _TOO_OLD in text:
            return RemotePythonMissing(
                f"the Python on {where} ({self.python}) is too old: patchkit needs 3.8 or newer; "
                f"pass --python (or set python) to a newer interpreter. {said}",
                **details,
            )
        if not started and returncode in (126, 127):
            return RemotePythonMissing(
                f"no Python interpreter {self.python!r} on {where}: install Python 3.8+ there or "
                f"pass --python (or set python in patchkit.toml) to its path. The host said: {said}",
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


_NOTHING_RAN = "nothing ran on the host: the target is unchanged and the command is safe to run again."


def _may_have_run(status_command: str) -> str:
    return (
        "The run may have completed on the host (a lost connection does not stop it there) or "
        "have been killed part way through writing; either way the next patchkit run on this "
        "target finishes or undoes it from its journal. "
        f"Run `{status_command}` to see which: it recovers an interrupted run and reports the "
        "fixes' state."
    )


#: What ssh prints when it fails to open the session (exit 255), the error, and the advice;
#: the first match wins.
_SSH_FAILURES: tuple[tuple[tuple[str, ...], type[RemoteError], str], ...] = (
    (("REMOTE HOST IDENTIFICATION HAS CHANGED", "has changed and you have requested strict"),
     HostKeyError,
     "the host key of {where} does not match the one in known_hosts: the host was reinstalled "
     "or someone is intercepting the connection. Check the new key's fingerprint with the "
     "host's administrator, then replace the old entry in known_hosts (ssh-keygen -R) and retry."),
    (("Host key verification failed", "host key is known for", "No host key is known"),
     HostKeyError,
     "the host key of {where} is not in known_hosts. Check its fingerprint with the host's "
     "administrator and add it to known_hosts (for example connect once with ssh and compare "
     "the fingerprint it shows), then retry."),
    (("Permission denied (", "Too many authentication failures", "No more authentication methods",
      "Authentication failed"),
     AuthenticationFailed,
     "SSH authentication to {where} failed: check the user name, that your key is in the "
     "host's authorized_keys and loaded (ssh-agent or IdentityFile)."),
    (("Could not resolve hostname", "Name or service not known", "nodename nor servname",
      "Temporary failure in name resolution", "No address associated with hostname",
      "Connection refused", "timed out", "No route to host", "Network is unreachable"),
     HostUnreachable,
     "cannot reach {where}: check the host name, port and network."),
)


def parse_result(stdout: bytes) -> dict[str, Any] | None:
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
