"""The ssh session: how a host is named (:class:`SshSpec`), the ``ssh`` command line, and one
session per operation that runs the agent there, with its time limit (the only module that runs
``ssh``). What is said on the session is the agent protocol (protocol.py): the payload goes to
the agent on stdin, and it runs nothing until the client's go-ahead (docs/remote.md)."""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.store import Store
from ..errors import ConnectionLost, RemoteError, UsageError, reap
from .protocol import (GO_LINE, READY_MARKER, SAYS_PREFIX, agent_payload, classify_failure, may_have_run,
                       parse_result, remote_command)

DEFAULT_CONNECT_TIMEOUT = 15


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


def ssh_argv(spec: SshSpec, command: str) -> list[str]:
    """The full ``ssh`` command line for one session running ``command`` on the host."""
    argv = [spec.program, *spec.options, "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={DEFAULT_CONNECT_TIMEOUT}",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
            "-T"]  # last, so it beats a user's -t: a pty would mangle the payload on stdin
    port = ["-p", str(spec.port)] if spec.port is not None else []
    return [*argv, *port, spec.destination, "--", command]


def run_engine(spec: SshSpec, request: Mapping[str, Any], *, python: str = "python3",
               modules: Mapping[str, str] | None = None, timeout: float | None = None,
               status_command: str = "patchkit status",
               run_timeout: float | None = None) -> dict[str, Any]:
    """Run ``patchkit.engine.run(request)`` on the host; return its result, ``error`` included
    (only transport failures raise). ``status_command`` is named in a lost connection's error.
    ``timeout``: seconds for the whole session; ``run_timeout``: seconds it may last once the
    request reached the engine (the go-ahead went), however long reaching the host took."""
    session = _Session(spec, python, status_command, run_timeout)
    try:
        session.run(agent_payload(request, modules), timeout)
    except BaseException as exc:
        session.close()
        if session.went and not isinstance(exc, Exception):  # an interrupt (^C, a signal)
            signum = getattr(exc, "signum", signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None)
            by = f" by {signal.Signals(signum).name}" if signum is not None else ""
            raise ConnectionLost(
                f"patchkit was interrupted{by} after the request reached the engine on {spec.url}; "
                f"the session was closed. {may_have_run(status_command)}",
                **session.details(None), **({"signal": by[4:]} if by else {}),
            ) from exc
        raise
    result = parse_result(session.stdout)
    if result is not None:
        return result  # complete, even if ssh was slow to exit after it
    raise session.failure()


class _Session:
    """One ssh process's conversation with the agent. ``went``: ``GO_LINE`` was handed to ssh,
    so the engine may have run."""

    def __init__(self, spec: SshSpec, python: str, status_command: str,
                 run_timeout: float | None = None) -> None:
        self.spec, self.python, self.status_command = spec, python, status_command
        self.run_timeout = run_timeout
        self.limit: float | None = None  # the time limit that ends the session now
        self.command = remote_command(python)
        self.argv = ssh_argv(spec, self.command)
        self.deadline: float | None = None
        self.went = self.timed_out = False
        self.stdout = b""
        self._stderr: list[bytes] = []
        self.on_wait = Store.listener()  # who hears what the engine there says of its wait
        pipe = subprocess.PIPE
        try:
            self.proc = subprocess.Popen(self.argv, stdin=pipe, stdout=pipe, stderr=pipe)
        except OSError as exc:  # not found or not executable: nothing was sent anywhere
            raise UsageError(
                f"cannot run the ssh program {spec.program!r} for {spec.url} ({exc.strerror}): "
                "install the OpenSSH client, or name an executable ssh client with --ssh-program "
                "(ssh_program in patchkit.toml's target; RemoteTarget's ssh_program)",
                host=spec.host,
            ) from exc

    def _left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def run(self, payload: bytes, timeout: float | None) -> None:
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.limit = timeout
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
        if self.run_timeout is not None:
            ends = time.monotonic() + self.run_timeout
            if self.deadline is None or ends < self.deadline:
                self.deadline, self.limit = ends, self.run_timeout
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
        """Keep ssh's stderr for the error details, all but the agent's SAYS lines: each of
        those goes to ``on_wait``, prefixed with the host (a lock wait there, said as it begins)."""
        stream = self.proc.stderr
        assert stream is not None
        for line in iter(stream.readline, b""):
            if line.startswith(SAYS_PREFIX):
                if self.on_wait is not None:
                    text = line[len(SAYS_PREFIX):].decode("utf-8", "replace").strip()
                    try:
                        self.on_wait(f"{self.spec.url}: {text}")
                    except Exception:  # noqa: BLE001  a progress line that fails must not stop
                        pass  # the draining: ssh would block on a full stderr pipe
                continue
            self._stderr.append(line)

    def close(self) -> None:
        """End the session: kill our ssh (the agent, if it was told to run, goes on)."""
        if self.proc.poll() is None:
            self.proc.kill()
        reap(self.proc)  # a signal may have cut a wait short, its wait lock held
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def details(self, returncode: int | None) -> dict[str, Any]:
        """The error details: where, the command (the agent elided), exit code, ssh's stderr."""
        # the command as run (python -S -c ...), its program (the bootstrap) elided
        agent = f"{self.command.split(' -c ', 1)[0]} -c '<patchkit agent>'"
        return {"host": self.spec.host, "port": self.spec.port, "user": self.spec.user,
                "command": shlex.join(agent if w == self.command else w for w in self.argv),
                "exit_code": returncode, "stderr": b"".join(self._stderr).decode("utf-8", "replace")}

    def failure(self) -> RemoteError:
        """The error for a session that ended without a result."""
        returncode = None if self.timed_out else (
            self.proc.returncode if self.proc.returncode is not None else -1)
        return classify_failure(self.details(returncode), where=self.spec.url, python=self.python,
                                stdout=self.stdout, went=self.went, timeout=self.limit,
                                timed_out=self.timed_out, status_command=self.status_command)
