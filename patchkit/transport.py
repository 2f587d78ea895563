"""Run the engine on a host over one OpenSSH session (the only module that runs ``ssh``).

One call to :func:`run_engine` is one ``ssh`` process and one session:

    ssh [options] [-p port] [user@]host -- <python> -c <agent loader>

The remote command is fixed: it holds the interpreter name and a loader for the agent, never
a value from a manifest or request. Everything else travels on stdin as one length-prefixed
JSON payload (``<decimal byte count>\\n{"modules": {dotted name: source}, "request": {...}}``).
The agent (:data:`AGENT`, standard library only, Python 3.8+) builds ``patchkit``,
``patchkit.errors`` and ``patchkit.engine[.*]`` in memory from those sources, ignores SIGHUP
and SIGPIPE so that a dropped connection cannot stop a transaction half way, runs
``patchkit.engine.run(request)`` and prints :data:`RESULT_MARKER` followed by the result JSON.

ssh's failures are told apart by its exit code (255 is ssh's own) and its stderr, and raised
as the :mod:`patchkit.errors` remote classes, each message naming the host.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import (
    AuthenticationFailed,
    ConnectionLost,
    HostKeyError,
    HostUnreachable,
    RemoteError,
    RemotePythonMissing,
    UsageError,
)

STARTED_MARKER = b"\n--patchkit-agent-started-1--\n"
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
AGENT = f"STARTED = {STARTED_MARKER!r}\nRESULT = {RESULT_MARKER!r}\n{_AGENT_BODY}"


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
    base = Path(__file__).resolve().parent
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
) -> dict[str, Any]:
    """Run ``patchkit.engine.run(request)`` on the host in one session; return its result.

    The result's ``error`` is returned as the engine wrote it (the caller re-raises it), so
    only transport failures raise here.
    """
    sources = engine_modules() if modules is None else dict(modules)
    payload = json.dumps({"modules": sources, "request": dict(request)}).encode("ascii")
    command = remote_command(python)
    argv = ssh_argv(spec, command)
    try:
        proc = subprocess.run(
            argv,
            input=str(len(payload)).encode("ascii") + b"\n" + payload,
            capture_output=True,
            timeout=timeout,
        )
    except OSError as exc:  # not found or not executable: nothing was sent anywhere
        raise UsageError(
            f"cannot run the ssh program {spec.program!r} for {spec.url} ({exc.strerror}): install "
            "the OpenSSH client or set ssh_program to an executable",
            host=spec.host,
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise ConnectionLost(
            f"no result from {spec.url} within {timeout:g} s; the session was closed. "
            + _RECOVERY_ADVICE,
            **_details(spec, argv, command, None, exc.stderr or b""),
        ) from exc
    result = _parse_result(proc.stdout)
    if result is not None:
        return result
    raise classify_failure(spec, python, proc.returncode, proc.stderr, proc.stdout, argv, command)


_RECOVERY_ADVICE = (
    "The host either finished the run or left a journal that the next `patchkit status` or "
    "`patchkit apply` recovers; run `patchkit status` on this target now."
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
) -> RemoteError:
    """Name the way a session ended without a result, from ssh's exit code and stderr."""
    text = stderr.decode("utf-8", "replace")
    where = spec.url
    details = _details(spec, argv, command, returncode, stderr)
    said = _tail(text)
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
    if started or returncode < 0:
        how = "was killed" if returncode < 0 else f"ended with exit code {returncode}"
        return ConnectionLost(
            f"the session to {where} {how} before the result arrived. {_RECOVERY_ADVICE}"
            + (f" ssh said: {said}" if said else ""),
            **details,
        )
    who = "ssh" if returncode == _SSH_FAILED else "the host"
    return RemoteError(
        f"the session to {where} failed before patchkit started (exit code {returncode}); "
        f"nothing ran. {who} said: {said or '(nothing)'}",
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
