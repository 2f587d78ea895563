"""The agent protocol, on the client (docs/remote.md): the bootstrap command a host runs, the
payload on its stdin, the result on its stdout, and what a conversation that ended without a
result means (:func:`classify_failure`: ``SessionFailed``, nothing ran, against
``ConnectionLost``, it may have). The ``ssh://`` session (transport.py) and the fleet's action
plugin both speak it; the agent's side is agent.py, shipped as source."""

from __future__ import annotations

import base64
import functools
import importlib.machinery
import importlib.util
import json
import marshal
import shlex
import types
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import (AuthenticationFailed, ConnectionLost, HostKeyError, HostUnreachable, RemoteError,
                      RemotePythonMissing, SessionFailed, UsageError)
from . import agent

STARTED_MARKER = agent.STARTED
READY_MARKER = agent.READY
GO_LINE = agent.GO
RESULT_MARKER = agent.RESULT
SAYS_PREFIX = agent.SAYS.encode("ascii")
SSH_FAILED = 255  # ssh's own exit code: it could not open or keep the session
_PACKAGE = Path(__file__).resolve().parent.parent
NOTHING_RAN = "nothing ran on the host: the target is unchanged and the command is safe to run again."


def _engine_files() -> dict[str, Path]:
    """Module name -> file of what is shipped to hosts: ``patchkit.errors`` and every
    ``patchkit.engine`` module."""
    paths = [_PACKAGE / "errors.py", *sorted((_PACKAGE / "engine").rglob("*.py"))]
    names = (".".join(p.relative_to(_PACKAGE.parent).with_suffix("").parts) for p in paths)
    return {name.removesuffix(".__init__"): path for name, path in zip(names, paths)}


@functools.lru_cache(maxsize=1)
def engine_modules() -> dict[str, str]:
    """The sources shipped to hosts (read once: the dict is shared, never changed)."""
    return {name: path.read_text(encoding="utf-8") for name, path in _engine_files().items()}


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


@functools.lru_cache(maxsize=1)
def _code_frame() -> bytes:
    """The shipped modules' code objects, as this Python compiled them (its ``.pyc`` files,
    compiled now where they are missing or stale), marshalled and compressed behind this
    Python's bytecode magic number. A host whose Python has the same magic number runs them
    instead of compiling the sources it also receives (docs/remote.md)."""
    code = {}
    for name, path in _engine_files().items():
        compiled = importlib.machinery.SourceFileLoader(name, str(path)).get_code(name)
        if compiled is None:
            return b""
        code[name] = _renamed(compiled, agent.filename(name, path.name == "__init__.py"))
    return importlib.util.MAGIC_NUMBER + zlib.compress(marshal.dumps(code), 6)


@functools.lru_cache(maxsize=1)
def _bootstrap() -> str:
    """The one-line program ``python -S -c`` runs: agent.py's source, compressed, run as
    ``__main__`` (no ``site``: the agent needs only the standard library, and a host's
    site-packages would cost every session their start-up). Double quotes only, so the
    single-quoted word survives any login shell (csh included)."""
    source = Path(agent.__file__).read_bytes()
    encoded = base64.b64encode(zlib.compress(source, 9)).decode("ascii")
    return ('import sys;sys.path[:1]==[""] and sys.path.pop(0);'
            f'sys.version_info<(3,8) and sys.exit({json.dumps(agent.TOO_OLD)}+" "+sys.version.split()[0]);'
            f'import zlib,base64;exec(zlib.decompress(base64.b64decode("{encoded}")))')


def remote_command(python: str) -> str:
    """The command line the remote user's shell runs; it holds no request data."""
    if not python or any(c in python for c in "\0\n\r"):
        raise UsageError(f"invalid remote Python interpreter {python!r}: give a command name or path")
    return " ".join(shlex.quote(word) for word in (python, "-S", "-c", _bootstrap()))


def agent_payload(request: Mapping[str, Any], modules: Mapping[str, str] | None = None) -> bytes:
    """What the agent reads on stdin before it is told to go: the lengths of its three frames
    on one line, then the engine's sources and ``request``, each as zlib-compressed JSON, and
    the sources' code objects (:func:`_code_frame`; empty when ``modules`` are not the
    engine's). The sources' and code's frames are made once per process (:func:`warm`)."""
    sources = _modules_frame() if modules is None else _frame(dict(modules))
    code = _code_frame() if modules is None else b""
    asked = _frame(dict(request))
    return f"{len(sources)} {len(asked)} {len(code)}\n".encode("ascii") + sources + asked + code


def _frame(value: Any) -> bytes:
    return zlib.compress(json.dumps(value).encode("ascii"), 6)


@functools.lru_cache(maxsize=1)
def _modules_frame() -> bytes:
    return _frame(engine_modules())


def warm() -> None:
    """Read and compress what every session ships (the bootstrap, the engine's sources and
    code) now: the fleet's callback calls it in ``ansible-playbook``'s main process, so the
    worker it forks for each host and task inherits them instead of making them again."""
    _bootstrap()
    _modules_frame()
    _code_frame()


def parse_result(stdout: bytes) -> dict[str, Any] | None:
    """The agent's result on ``stdout``, or None when none arrived whole."""
    at = stdout.rfind(RESULT_MARKER)
    if at < 0:
        return None
    line = stdout[at + len(RESULT_MARKER):].split(b"\n", 1)[0]
    try:
        result = json.loads(line.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None  # cut short: the connection dropped while the result was on its way
    return result if isinstance(result, dict) else None


def host_stdout(stdout: bytes) -> str:
    """What the host printed on stdout that is not the agent's own protocol."""
    for marker in (STARTED_MARKER, READY_MARKER):
        stdout = stdout.replace(marker, b"\n")
    at = stdout.find(RESULT_MARKER)
    return (stdout if at < 0 else stdout[:at]).decode("utf-8", "replace").strip()


def may_have_run(status_command: str) -> str:
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


def classify_failure(details: dict[str, Any], *, where: str, python: str, stdout: bytes,
                     went: bool, status_command: str, timeout: float | None = None,
                     timed_out: bool = False,
                     python_advice: str = "pass --python (or set python in patchkit.toml)") -> RemoteError:
    """The error for a conversation with the agent that ended without a result. ``went``: the
    go-ahead reached the agent, so the engine may have run (``ConnectionLost``); else nothing
    ran (``SessionFailed``, or what ssh or the host said stopped it). ``details`` (host,
    command, ``exit_code``, ``stderr``) go into the error; ``python_advice`` says how to name
    another interpreter."""
    if timed_out:
        assert timeout is not None
        if went:
            return ConnectionLost(
                f"no result from {where} within {timeout:g} s after the request reached the "
                f"engine there; the session was closed. {may_have_run(status_command)}", **details)
        return SessionFailed(
            f"no answer from the patchkit agent on {where} within {timeout:g} s; the session "
            f"was closed before the request reached the engine, so {NOTHING_RAN}", **details)
    returncode = details["exit_code"] if details.get("exit_code") is not None else -1
    text = details.get("stderr") or ""
    said = _tail(text)
    out = host_stdout(stdout)
    if out:  # a host may say why on stdout (a nologin shell: "This account is ...")
        details = {**details, "stdout": out[-4000:]}
        said = (f"{said} (stderr) / {_tail(out)} (stdout)" if said else _tail(out))
    how = ("was killed" if returncode < 0 else "was closed (ssh exit code 255)"
           if returncode == SSH_FAILED else f"ended with exit code {returncode}")
    if went:
        return ConnectionLost(
            f"the session to {where} {how} after the request reached the engine there, "
            f"before its result arrived. {may_have_run(status_command)}"
            + (f" ssh said: {said}" if said else ""), **details)
    started = STARTED_MARKER in stdout
    if not started:
        refused = _not_started(where, python, python_advice, returncode, text, said, details)
        if refused is not None:
            return refused
    stage = ("before the request reached the patchkit engine there" if started
             else "and the patchkit agent did not start there")
    who = "ssh" if returncode == SSH_FAILED else "the host"
    return SessionFailed(f"the session to {where} {how} {stage}, so {NOTHING_RAN} "
                         f"{who} said: {said or '(nothing)'}", **details)


def _not_started(where: str, python: str, advice: str, returncode: int, text: str, said: str,
                 details: dict[str, Any]) -> RemoteError | None:
    """The error for an agent that never started, when ssh or the host said why."""
    if returncode == SSH_FAILED:
        for signs, error, message in _SSH_FAILURES:
            if any(sign in text for sign in signs):
                return error(f"{message.format(where=where)} ssh said: {said}", **details)
    if agent.TOO_OLD in text:
        return RemotePythonMissing(
            f"the Python on {where} ({python}) is too old: patchkit needs 3.8 or newer; "
            f"{advice} to a newer interpreter. {said}", **details)
    if returncode in (126, 127):
        return RemotePythonMissing(
            f"no Python interpreter {python!r} on {where}: install Python 3.8+ there or "
            f"{advice} to its path; {NOTHING_RAN} The host said: {said}", **details)
    return None


def _tail(text: str, lines: int = 6) -> str:
    kept = [ln.strip() for ln in text.replace("\r", "").splitlines() if ln.strip().strip("@")]
    return " / ".join(kept[-lines:])
