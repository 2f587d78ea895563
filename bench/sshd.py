"""A throwaway OpenSSH server on 127.0.0.1 for the benchmarks, and a counting ssh program.

The same setup as the test suite's server (tests/fixtures/sshd.py) without pytest: fresh host
and user keys in a temporary directory, no real ``~/.ssh`` read or written, and an ``sftp``
subsystem so plain ``scp`` works as it does against a stock server. The server logs every
accepted connection, so connections are counted on the server side too, not only by the
client wrapper.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
_SFTP_CANDIDATES = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                    "/usr/libexec/sftp-server")
_PRIVSEP_DIR = Path("/run/sshd")


@dataclass(frozen=True)
class LoopbackSshd:
    """A running server and a client wrapper that reaches only it and logs each invocation."""

    host: str
    port: int
    user: str
    workdir: Path
    log: Path
    ssh_program: Path  # `ssh` with this server's key and known_hosts; one log line per run
    invocations: Path

    def client_runs(self) -> int:
        """How many times an ssh client was started through :attr:`ssh_program`."""
        return len(self.invocations.read_text().split()) if self.invocations.exists() else 0

    def accepted(self) -> int:
        """How many connections the server authenticated (from its log)."""
        return self.log.read_text(errors="replace").count("Accepted publickey for")


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "patchkit-bench", "-f",
                    str(path)], check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _find(candidates: tuple[str, ...], name: str) -> str | None:
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(name)


def _config(workdir: Path, port: int, sftp: str) -> Path:
    path = workdir / "sshd_config"
    path.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1",
        f"HostKey {workdir / 'host_key'}", f"PidFile {workdir / 'sshd.pid'}",
        f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
        "StrictModes no", "PermitRootLogin prohibit-password", "UsePAM no",
        "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "X11Forwarding no", "AllowAgentForwarding no", "PrintMotd no", "MaxStartups 50:30:100",
        f"Subsystem sftp {sftp}", "LogLevel VERBOSE", "",
    ]))
    return path


def _wait_for_banner(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not answer on port {port}:\n{log.read_text()}")


@contextmanager
def loopback_sshd() -> Iterator[LoopbackSshd]:
    """Start the server; stop it and remove its keys on exit."""
    program, sftp = _find(_SSHD_CANDIDATES, "sshd"), _find(_SFTP_CANDIDATES, "sftp-server")
    if program is None or sftp is None:
        raise SystemExit("the benchmark needs the OpenSSH server (sshd and sftp-server); "
                         "install openssh-server")
    if os.geteuid() == 0 and not _PRIVSEP_DIR.is_dir():
        _PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="patchkit-bench-sshd-"))
    proc = None
    try:
        _keygen(workdir / "host_key")
        identity = workdir / "id_ed25519"
        _keygen(identity)
        shutil.copyfile(f"{identity}.pub", workdir / "authorized_keys")
        log = workdir / "sshd.log"
        port = _free_port()
        with log.open("ab") as out:
            proc = subprocess.Popen([program, "-D", "-e", "-f", str(_config(workdir, port, sftp))],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        _wait_for_banner(proc, port, log)
        kind, key = (workdir / "host_key.pub").read_text().split()[:2]
        known_hosts = workdir / "known_hosts"
        known_hosts.write_text(f"[127.0.0.1]:{port} {kind} {key}\n")
        invocations = workdir / "ssh-invocations"
        wrapper = workdir / "ssh"
        options = " ".join(f"-o {o}" for o in (
            f"UserKnownHostsFile={known_hosts}", "GlobalKnownHostsFile=/dev/null",
            "StrictHostKeyChecking=yes", f"IdentityFile={identity}", "IdentitiesOnly=yes",
            "IdentityAgent=none", "BatchMode=yes", "LogLevel=ERROR"))
        wrapper.write_text(f'#!/bin/sh\necho $$ >> "{invocations}"\nexec ssh -F none {options} "$@"\n')
        wrapper.chmod(0o755)
        yield LoopbackSshd("127.0.0.1", port, pwd.getpwuid(os.getuid()).pw_name, workdir, log,
                           wrapper, invocations)
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
