"""The benchmarks' loopback OpenSSH server, with a counting ssh program.

The server is the test suite's (tests/fixtures/sshd_server.py, which needs no pytest); this adds
a client wrapper that reaches only it and logs each invocation, so connections are counted on
the client side as well as in the server's log.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's tests/

from tests.fixtures.sshd_server import SshdMissing, SshServer, running_sshd  # noqa: E402


@dataclass(frozen=True)
class LoopbackSshd:
    """A running server and a client wrapper that reaches only it and logs each invocation."""

    server: SshServer
    ssh_program: Path  # `ssh` with this server's key and known_hosts; one log line per run
    invocations: Path

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def user(self) -> str:
        return self.server.user

    def client_runs(self) -> int:
        """How many times an ssh client was started through :attr:`ssh_program`."""
        return len(self.invocations.read_text().split()) if self.invocations.exists() else 0

    def accepted(self) -> int:
        """How many connections the server authenticated (from its log)."""
        return self.server.accepted()


@contextmanager
def loopback_sshd() -> Iterator[LoopbackSshd]:
    """Start the server; stop it and remove its keys on exit."""
    workdir = Path(tempfile.mkdtemp(prefix="patchkit-bench-sshd-"))
    try:
        with running_sshd(workdir) as server:
            invocations = workdir / "ssh-invocations"
            wrapper = workdir / "ssh"
            options = " ".join(f"'{arg}'" for arg in server.ssh_options())
            wrapper.write_text(f'#!/bin/sh\necho $$ >> "{invocations}"\nexec ssh {options} "$@"\n')
            wrapper.chmod(0o755)
            yield LoopbackSshd(server, wrapper, invocations)
    except SshdMissing as exc:
        raise SystemExit(f"the benchmark needs {exc}") from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
