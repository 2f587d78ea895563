"""The SSH transport and remote targets, against a real sshd on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from patchkit import errors
from patchkit.engine.contract import result_envelope
from patchkit.targets.remote import RemoteTarget, parse_ssh_url
from patchkit.targets.protocol import engine_modules, remote_command
from patchkit.targets.transport import SshSpec, run_engine
from tests.fixtures.procs import alive
from tests.fixtures.sshd import SshServer

pytestmark = pytest.mark.ssh

# A throwaway engine: a package with a submodule, so the shipped relative imports are exercised.
ENGINE_INIT = '''
import os, sys
from .work import write_file, wait_for
from ..errors import PreconditionFailed


def run(request):
    test = request["test"]
    root = request["roots"]["sglang"]
    action = test["action"]
    if action == "fail":
        raise PreconditionFailed("grep failed in " + root, where="sglang:x.py")
    if action == "crash":
        return 1 // 0
    if action == "noise":
        print("noise on stdout")
        os.system("echo noise from a child")
        sys.stderr.write("noise on stderr\\n")
    if action == "linger":  # a child that keeps the session's stderr open after the result
        import subprocess
        child = subprocess.Popen(["sleep", "60"])
        write_file(os.path.join(root, "lingering"), str(child.pid))
    if action == "wait":
        write_file(os.path.join(root, "started"), "")
        wait_for(os.path.join(root, "release"))
        print("stdout after the client is gone")
        sys.stderr.write("stderr after the client is gone\\n")
    write_file(os.path.join(root, test.get("file", "out.txt")), test.get("content", "done"))
    return {"format": 1, "op": request["op"], "ok": True, "dry_run": False, "recovered": [],
            "fixes": [], "status": None, "error": None,
            "echo": {"roots": request["roots"], "python": request.get("python"),
                     "executable": sys.executable, "package": __package__,
                     "prefix": __import__("subprocess").run(  # what the checks' Python sees
                         [sys.executable, "-c", "import sys; print(sys.prefix)"],
                         capture_output=True, text=True).stdout.strip()}}
'''

ENGINE_WORK = '''
import os, time


def write_file(path, text):
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)


def wait_for(path):
    deadline = time.monotonic() + 60  # never linger on the host if a test went wrong
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
'''


def modules() -> dict[str, str]:
    return {
        "patchkit.errors": engine_modules()["patchkit.errors"],
        "patchkit.engine.contract": engine_modules()["patchkit.engine.contract"],
        "patchkit.engine": ENGINE_INIT,
        "patchkit.engine.work": ENGINE_WORK,
    }


def request(root: Path | str, **test: Any) -> dict[str, Any]:
    test.setdefault("action", "write")
    return {"format": 1, "op": "apply", "roots": {"sglang": str(root)}, "test": test}


def spec_for(server: SshServer, **overrides: Any) -> SshSpec:
    fields: dict[str, Any] = {
        "host": server.host,
        "user": server.user,
        "port": server.port,
        "options": tuple(server.ssh_options()),
    }
    fields.update(overrides)
    return SshSpec(**fields)


def counting_wrapper(tmp_path: Path) -> tuple[Path, Path]:
    """An ssh program that records its pid per invocation, then becomes ssh."""
    log = tmp_path / "ssh-invocations"
    wrapper = tmp_path / "ssh-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho $$ >> "{log}"\nexec ssh "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


def interpreter(version: str) -> str | None:
    """An installed ``pythonX.Y`` that really runs (pyenv shims of inactive versions do not)."""
    import glob
    import pwd

    name = f"python{version}"
    pyenv = os.environ.get("PYENV_ROOT") or os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".pyenv")
    candidates = [shutil.which(name), *sorted(glob.glob(f"{pyenv}/versions/{version}.*/bin/{name}"))]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            return candidate
    return None


#: A time limit for runs that must reach the engine before it ends: the engine then waits, so
#: the limit ends the session. Generous, so that a busy machine still opens the session in time.
SESSION_LIMIT = 10
#: The limit once the request reached the engine (``run_timeout``): what these runs wait out.
#: Opening the session is not in it, so it can be short on a busy machine too; long enough for
#: the throwaway engine to send its result first where a test needs one.
RUN_LIMIT = 1.5


def wait_until(predicate: Any, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.02)


# -- round trip ------------------------------------------------------------------------------


def test_round_trip_runs_the_shipped_engine_on_the_host(sshd: SshServer, tmp_path: Path) -> None:
    result = run_engine(spec_for(sshd), request(tmp_path, content="héllo\n"), modules=modules())

    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "héllo\n"
    assert result["ok"] is True and result["error"] is None
    assert result["echo"]["roots"] == {"sglang": str(tmp_path)}
    assert result["echo"]["package"] == "patchkit.engine"


def test_one_ssh_invocation_per_call(sshd: SshServer, tmp_path: Path) -> None:
    wrapper, log = counting_wrapper(tmp_path)
    spec = spec_for(sshd, program=str(wrapper))

    run_engine(spec, request(tmp_path, file="a"), modules=modules())
    assert len(log.read_text().splitlines()) == 1
    run_engine(spec, request(tmp_path, file="b"), modules=modules())
    assert len(log.read_text().splitlines()) == 2
    assert (tmp_path / "a").exists() and (tmp_path / "b").exists()


def test_engine_error_comes_back_as_the_engine_wrote_it(sshd: SshServer, tmp_path: Path) -> None:
    result = run_engine(spec_for(sshd), request(tmp_path, action="fail"), modules=modules())

    assert result["ok"] is False
    assert result["error"] == {
        "type": "PreconditionFailed",
        "message": f"grep failed in {tmp_path}",
        "details": {"where": "sglang:x.py"},
    }
    assert isinstance(errors.error_from_dict(result["error"]), errors.PreconditionFailed)


def test_engine_crash_is_an_internal_error_with_the_traceback(sshd: SshServer, tmp_path: Path) -> None:
    result = run_engine(spec_for(sshd), request(tmp_path, action="crash"), modules=modules())

    assert result["ok"] is False and result["error"]["type"] == "InternalError"
    assert "ZeroDivisionError" in result["error"]["message"]
    assert "<patchkit-agent>/patchkit/engine/__init__.py" in result["error"]["details"]["traceback"]
    # the agent's answer is the contract's envelope, the one the engine fills in
    assert result == result_envelope(request(tmp_path, action="crash"), result["error"])


def test_output_of_the_engine_and_its_children_does_not_corrupt_the_result(
    sshd: SshServer, tmp_path: Path
) -> None:
    result = run_engine(spec_for(sshd), request(tmp_path, action="noise"), modules=modules())

    assert result["ok"] is True
    assert (tmp_path / "out.txt").read_text() == "done"


# -- quoting ---------------------------------------------------------------------------------


def test_hostile_paths_reach_the_engine_byte_exact_and_run_nothing(
    sshd: SshServer, tmp_path: Path
) -> None:
    evil = f"a b 'c' \"d\" $(touch {tmp_path}/pwned) `touch {tmp_path}/pwned2` ; touch {tmp_path}/pwned3 \\ *"
    root = Path(f"{tmp_path}/{evil}")
    root.mkdir(parents=True)
    python_dir = Path(f"{tmp_path}/py {evil}")
    python_dir.mkdir(parents=True)
    python = python_dir / "python3"
    python.symlink_to(sys.executable)

    result = run_engine(spec_for(sshd), request(root), python=str(python), modules=modules())

    assert result["echo"]["roots"]["sglang"] == str(root)
    assert result["echo"]["executable"] == str(python)
    assert (root / "out.txt").read_text() == "done"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pwned")) == []


def test_the_remote_command_holds_no_request_data() -> None:
    command = remote_command("python3")
    assert command.startswith("python3 -S -c '")
    assert "sglang" not in command and "roots" not in command



def test_the_agent_is_its_module_shipped_compressed_and_so_is_the_payload() -> None:
    import base64
    import importlib.util
    import re
    import zlib

    from patchkit.targets import agent
    from patchkit.targets.protocol import agent_payload

    encoded = re.search(r'b64decode\("([A-Za-z0-9+/=]+)"\)', remote_command("python3"))
    assert encoded is not None
    assert zlib.decompress(base64.b64decode(encoded.group(1))) == Path(agent.__file__).read_bytes()
    framed = agent_payload({"op": "status"})
    header, body = framed.split(b"\n", 1)
    sources, asked, code = (int(n) for n in header.split())
    assert sources + asked + code == len(body)
    assert json.loads(zlib.decompress(body[:sources])) == engine_modules()
    assert json.loads(zlib.decompress(body[sources:sources + asked])) == {"op": "status"}
    assert sources < len(json.dumps(engine_modules())) / 2
    assert body[sources + asked:].startswith(importlib.util.MAGIC_NUMBER)

# -- failures --------------------------------------------------------------------------------


def test_changed_host_key_is_refused_and_nothing_runs(sshd: SshServer, tmp_path: Path) -> None:
    other = sshd.new_key("other_host_key")
    kind, key = Path(f"{other}.pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{sshd.host}]:{sshd.port} {kind} {key}\n")
    spec = spec_for(sshd, options=tuple(sshd.ssh_options(known_hosts=known_hosts)))

    with pytest.raises(errors.HostKeyError) as caught:
        run_engine(spec, request(tmp_path), modules=modules())

    message = caught.value.message
    assert sshd.host in message and "known_hosts" in message and "does not match" in message
    assert "StrictHostKeyChecking" not in message
    assert caught.value.exit_code == errors.EXIT_HOSTKEY
    assert not (tmp_path / "out.txt").exists()


def test_unknown_host_key_with_strict_checking_is_refused(sshd: SshServer, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    spec = spec_for(sshd, options=tuple(sshd.ssh_options(known_hosts=known_hosts)))

    with pytest.raises(errors.HostKeyError) as caught:
        run_engine(spec, request(tmp_path), modules=modules())

    assert "not in known_hosts" in caught.value.message and sshd.host in caught.value.message
    assert known_hosts.read_text() == ""  # never learned behind the user's back
    assert not (tmp_path / "out.txt").exists()


def test_wrong_identity_is_an_authentication_failure(sshd: SshServer, tmp_path: Path) -> None:
    stranger = sshd.new_key("stranger_key")
    spec = spec_for(sshd, options=tuple(sshd.ssh_options(identity=stranger)))

    with pytest.raises(errors.AuthenticationFailed) as caught:
        run_engine(spec, request(tmp_path), modules=modules())

    assert sshd.host in caught.value.message and "authorized_keys" in caught.value.message
    assert caught.value.exit_code == errors.EXIT_AUTH
    assert not (tmp_path / "out.txt").exists()


def test_closed_port_is_unreachable(sshd: SshServer, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago and nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]

    with pytest.raises(errors.HostUnreachable) as caught:
        run_engine(spec_for(sshd, port=closed), request(tmp_path), modules=modules())

    assert f"127.0.0.1:{closed}" in caught.value.message
    assert "Connection refused" in caught.value.message
    assert caught.value.exit_code == errors.EXIT_UNREACHABLE


@pytest.mark.parametrize("python", ["/nonexistent/bin/python3", "no-such-python3.99"])
def test_missing_remote_python(sshd: SshServer, tmp_path: Path, python: str) -> None:
    with pytest.raises(errors.RemotePythonMissing) as caught:
        run_engine(spec_for(sshd), request(tmp_path), python=python, modules=modules())

    message = caught.value.message
    assert python in message and "--python" in message and sshd.host in message
    assert caught.value.exit_code == errors.EXIT_REMOTE_PYTHON


def test_agent_runs_on_python_3_8(sshd: SshServer, tmp_path: Path) -> None:
    python = interpreter("3.8")
    if python is None:
        pytest.skip("no Python 3.8 installed to check the oldest supported host interpreter")
    result = run_engine(spec_for(sshd), request(tmp_path), python=python, modules=modules())
    assert result["ok"] is True and result["echo"]["executable"] == python
    assert (tmp_path / "out.txt").read_text() == "done"


@pytest.mark.parametrize("version", ["3.7", "2.7"])
def test_too_old_remote_python(sshd: SshServer, tmp_path: Path, version: str) -> None:
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} installed to play an outdated host")
    with pytest.raises(errors.RemotePythonMissing) as caught:
        run_engine(spec_for(sshd), request(tmp_path), python=python, modules=modules())
    assert "3.8 or newer" in caught.value.message and f"found {version}." in caught.value.message
    assert not (tmp_path / "out.txt").exists()


def held_python(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A ``--python`` for the host that records its pid, then waits for ``release`` before it
    becomes the real interpreter: a host slow to start the agent (a busy login shell, a cold
    disk). (interpreter, pid file, release file)"""
    pid, release = tmp_path / "held-python-pid", tmp_path / "held-python-release"
    program = tmp_path / "held-python"
    program.write_text(
        "#!/bin/sh\n"
        f'echo $$ > "{pid}"\n'
        "i=0\n"  # never linger on the host if a test went wrong: 60 s at most
        f'while [ ! -e "{release}" ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    program.chmod(0o755)
    return program, pid, release


def command_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # gone already (the held interpreter's sleeps come and go)
        return None


def test_sshd_session_killed_before_the_agent_starts_ran_nothing(
    sshd: SshServer, tmp_path: Path
) -> None:
    """Authenticated, the remote command started, the agent not yet: the server side of the
    session dies. That is no unreachable host, and the request must never run afterwards."""
    python, pid_file, release = held_python(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    before = set(sshd.session_processes())
    outcome: dict[str, BaseException] = {}

    def call() -> None:
        try:
            run_engine(spec_for(sshd), request(root), python=str(python), modules=modules())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    wait_until(pid_file.exists, "the remote command to start on the host")
    wait_until(lambda: pid_file.read_text().strip() != "", "the remote command's pid")
    held = int(pid_file.read_text())
    session = [p for p in set(sshd.session_processes()) - before if command_name(p) == "sshd"]
    assert session and held not in session
    for pid in session:
        os.kill(pid, signal.SIGKILL)
    thread.join(30)

    error = outcome.get("error")
    assert isinstance(error, errors.SessionFailed), error
    assert error.exit_code == errors.EXIT_SESSION_FAILED != errors.EXIT_UNREACHABLE
    assert "nothing ran" in error.message and "unchanged" in error.message
    assert sshd.host in error.message and "cannot reach" not in error.message
    release.touch()  # the host starts the agent after all, with whatever reached its stdin
    wait_until(lambda: not alive(held), "the late agent on the host to end")
    assert not (root / "out.txt").exists()


def test_timeout_before_the_agent_starts_ran_nothing(sshd: SshServer, tmp_path: Path) -> None:
    python, pid_file, release = held_python(tmp_path)
    root = tmp_path / "root"
    root.mkdir()

    with pytest.raises(errors.SessionFailed) as caught:
        run_engine(spec_for(sshd), request(root), python=str(python), modules=modules(), timeout=1)

    assert "nothing ran" in caught.value.message and "unchanged" in caught.value.message
    release.touch()
    if pid_file.exists():  # on a busy machine the timeout can come before the host starts it
        wait_until(lambda: pid_file.read_text().strip() and not alive(int(pid_file.read_text())),
                   "the late agent on the host to end")
    assert not (root / "out.txt").exists()


def test_remote_command_that_exits_at_once_is_session_failed(sshd: SshServer, tmp_path: Path) -> None:
    """A host whose command ends before the agent (a ForceCommand, a broken shell)."""
    python = tmp_path / "gone"
    python.write_text("#!/bin/sh\necho 'this account runs nothing' >&2\nexit 1\n")
    python.chmod(0o755)

    with pytest.raises(errors.SessionFailed) as caught:
        run_engine(spec_for(sshd), request(tmp_path), python=str(python), modules=modules())

    assert caught.value.exit_code == errors.EXIT_SESSION_FAILED
    assert "this account runs nothing" in caught.value.message and "nothing ran" in caught.value.message
    assert not (tmp_path / "out.txt").exists()


def test_killed_client_is_connection_lost_and_the_host_finishes(
    sshd: SshServer, tmp_path: Path
) -> None:
    wrapper, pids = counting_wrapper(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    outcome: dict[str, BaseException] = {}

    def call() -> None:
        try:
            run_engine(spec_for(sshd, program=str(wrapper)), request(root, action="wait"),
                       modules=modules())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    wait_until((root / "started").exists, "the engine to start on the host")
    os.kill(int(pids.read_text().split()[-1]), signal.SIGKILL)
    thread.join(30)

    error = outcome.get("error")
    assert isinstance(error, errors.ConnectionLost), error
    assert error.exit_code == errors.EXIT_CONNECTION_LOST
    assert "after the request reached the engine" in error.message and sshd.host in error.message
    assert "completed on the host" in error.message and "killed part way through writing" in error.message
    assert "finishes or undoes it" in error.message and "Run `patchkit status`" in error.message
    assert not (root / "out.txt").exists()
    (root / "release").touch()  # only now may the host-side engine finish
    wait_until((root / "out.txt").exists, "the host-side engine to finish after the drop")


def test_hangup_and_server_drop_are_connection_lost_and_the_host_finishes(
    sshd: SshServer, tmp_path: Path
) -> None:
    before = set(sshd.session_processes())
    outcome: dict[str, BaseException] = {}

    def call() -> None:
        try:
            run_engine(spec_for(sshd), request(tmp_path, action="wait"), modules=modules())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    wait_until((tmp_path / "started").exists, "the engine to start on the host")
    # A hangup for the whole session, as a pty or a session manager delivers it, then the
    # server side of the connection dies.
    for pid in set(sshd.session_processes()) - before:
        os.kill(pid, signal.SIGHUP)
    for pid in set(sshd.session_pids()) - before:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    thread.join(30)

    assert isinstance(outcome.get("error"), errors.ConnectionLost), outcome
    (tmp_path / "release").touch()
    wait_until((tmp_path / "out.txt").exists, "the host-side engine to finish after the drop")


def test_timeout_closes_the_session_as_connection_lost(sshd: SshServer, tmp_path: Path) -> None:
    with pytest.raises(errors.ConnectionLost) as caught:
        run_engine(spec_for(sshd), request(tmp_path, action="wait"), modules=modules(),
                   timeout=SESSION_LIMIT, run_timeout=RUN_LIMIT,
                   status_command="patchkit status --target gpu7")

    assert "after the request reached the engine" in caught.value.message
    assert f"within {RUN_LIMIT:g} s" in caught.value.message  # the limit that ended it
    assert "Run `patchkit status --target gpu7`" in caught.value.message
    (tmp_path / "release").touch()
    wait_until((tmp_path / "out.txt").exists, "the host-side engine to finish after the timeout")


def test_remote_target_status_command_names_the_target_as_a_url() -> None:
    from patchkit.targets import resolve_target

    path = "/srv/a b/100%/sglang's"
    target = RemoteTarget(SshSpec("gpu7", "deploy", 2222, program="/opt/ssh wrapper"),
                          {"sglang": path, "serve": "/root"})
    words = shlex.split(target.status_command)

    assert words[:3] == ["patchkit", "status", "--target"]
    assert words[4:] == ["--root", "serve=/root", "--ssh-program", "/opt/ssh wrapper"]
    again = resolve_target(words[3], ["serve=/root"], ssh_program="/opt/ssh wrapper")
    assert again == target  # the URL in the command names the same host, port, user and root

    given = resolve_target("ssh://gpu7/srv", ["serve=/root"], ssh_options=["ProxyJump=b"])
    assert given.status_command == (  # type: ignore[attr-defined]
        "patchkit status --target ssh://gpu7/srv --root serve=/root --ssh-option ProxyJump=b")


def test_result_that_arrived_is_returned_when_the_session_outlives_the_timeout(
    sshd: SshServer, tmp_path: Path
) -> None:
    """The session stays open after the result (a child of the engine holds its stderr): the
    time limit closes it, but the complete result is the answer, not a lost connection."""
    try:
        result = run_engine(spec_for(sshd), request(tmp_path, action="linger"), modules=modules(),
                            timeout=SESSION_LIMIT, run_timeout=RUN_LIMIT)
    finally:
        if (tmp_path / "lingering").exists():
            os.kill(int((tmp_path / "lingering").read_text()), signal.SIGKILL)

    assert result["ok"] is True and (tmp_path / "out.txt").read_text() == "done"


def test_missing_ssh_program_is_a_usage_error(tmp_path: Path) -> None:
    spec = SshSpec(host="127.0.0.1", program=str(tmp_path / "no-ssh"))
    with pytest.raises(errors.UsageError, match="ssh_program"):
        run_engine(spec, request(tmp_path), modules=modules())


# -- remote targets --------------------------------------------------------------------------


def test_remote_target_replaces_the_request_roots(sshd: SshServer, tmp_path: Path) -> None:
    target = RemoteTarget(spec_for(sshd), {"sglang": str(tmp_path)}, None, modules=modules())
    sent = request("/somewhere/else")

    result = target.run(sent)

    assert result["echo"]["roots"] == {"sglang": str(tmp_path)}
    assert result["echo"]["python"] is None
    assert sent["roots"] == {"sglang": "/somewhere/else"}  # the caller's request is untouched
    assert (tmp_path / "out.txt").exists()
    assert target.is_remote is True
    assert target.description == f"ssh://{sshd.user}@127.0.0.1:{sshd.port} (sglang={tmp_path})"


def dotted(python: str) -> str:
    """``python`` reached through ``..`` (``.../bin/../bin/python``): the same file, other text."""
    bindir, name = os.path.split(python)
    return os.path.join(bindir, os.pardir, os.path.basename(bindir), name)


@pytest.mark.parametrize("spelling", ["as-is", "through-dotdot"])
def test_remote_target_passes_its_python(sshd: SshServer, tmp_path: Path, spelling: str) -> None:
    python = sys.executable if spelling == "as-is" else dotted(sys.executable)
    target = RemoteTarget(spec_for(sshd), {"sglang": str(tmp_path)}, python, modules=modules())
    result = target.run(request(tmp_path))
    assert result["echo"]["python"] == python  # the request carries the target's python as given
    # the host ran that interpreter (its environment, not just the file a venv's python links
    # to: the agent runs without site, but a check started with its sys.executable is in the
    # venv); its sys.executable may spell the path another way, so paths compare by identity
    assert os.path.samefile(result["echo"]["executable"], python)
    assert os.path.samefile(result["echo"]["prefix"], sys.prefix)


@pytest.mark.parametrize(
    ("url", "host", "user", "port", "path"),
    [
        ("ssh://gpu1/srv/sglang", "gpu1", None, None, "/srv/sglang"),
        ("ssh://deploy@gpu1.example.com:2222/opt/sg lang", "gpu1.example.com", "deploy", 2222, "/opt/sg lang"),
        ("ssh://root@[fe80::1%25eth0]:22/x%20y", "fe80::1%eth0", "root", 22, "/x y"),
        ("SSH://h/a/../b", "h", None, None, "/a/../b"),
    ],
)
def test_parse_ssh_url(url: str, host: str, user: str | None, port: int | None, path: str) -> None:
    spec, parsed = parse_ssh_url(url)
    assert (spec.host, spec.user, spec.port, parsed) == (host, user, port, path)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("gpu1:/srv/sglang", "ssh://"),
        ("http://gpu1/srv", "ssh://"),
        ("ssh://gpu1:0/srv", "1-65535"),
        ("ssh://gpu1:65536/srv", "1-65535"),
        ("ssh://gpu1:ab/srv", "1-65535"),
        ("ssh://gpu1:/srv", "1-65535"),
        ("ssh://gpu1", "no root path"),
        ("ssh://gpu1/", "no root path"),
        ("ssh://gpu1/~/sglang", "absolute"),
        ("ssh:///srv", "no host"),
        ("ssh://@gpu1/srv", "empty user"),
        ("ssh://u:pw@gpu1/srv", "passwords"),
        ("ssh://-oProxyCommand=x/srv", "invalid SSH host"),
        ("ssh://gpu1/srv?x=1", "'?'"),
        ("ssh://[::1/srv", "unclosed"),
    ],
)
def test_parse_ssh_url_refuses_malformed_urls(url: str, why: str) -> None:
    with pytest.raises(errors.UsageError) as caught:
        parse_ssh_url(url)
    assert why in caught.value.message and url in caught.value.message


def test_ssh_command_line_never_disables_host_key_checking(tmp_path: Path) -> None:
    wrapper = tmp_path / "argv-recorder"
    log = tmp_path / "argv"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{log}"\nexit 255\n')
    wrapper.chmod(0o755)

    with pytest.raises(errors.RemoteError):
        run_engine(SshSpec("h", "u", 2200, ("-o", "ProxyJump=b"), str(wrapper)), request(tmp_path),
                   modules=modules())

    argv = log.read_text().splitlines()
    assert "StrictHostKeyChecking=no" not in "".join(argv)
    assert argv[:2] == ["-o", "ProxyJump=b"]  # the user's options come first and win
    assert argv[-6:-1] == ["-T", "-p", "2200", "u@h", "--"]


def test_engine_modules_ship_errors_and_every_engine_file() -> None:
    shipped = engine_modules()
    root = Path(errors.__file__).parent
    expected = {"patchkit.errors", "patchkit.engine"} | {
        "patchkit.engine." + p.stem for p in (root / "engine").glob("*.py") if p.stem != "__init__"
    }
    assert expected <= set(shipped)
    assert shipped["patchkit.errors"] == (root / "errors.py").read_text()
    assert "patchkit" not in shipped  # the client package's __init__ is never shipped



# -- the real engine -------------------------------------------------------------------------


def sglang_tree(base: Path) -> Path:
    """A small checkout-layout git repository of SGLang 0.5.21."""
    root = base / "sglang"
    (root / "python/sglang/srt").mkdir(parents=True)
    (root / "python/sglang/__init__.py").write_text("")
    (root / "python/sglang/_version.py").write_text("__version__ = version = '0.5.21'\n")
    (root / "python/sglang/srt/pool.py").write_text("def per_token(d):\n    index_k = d\n    return index_k\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "release 0.5.21"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def real_request(op: str, root: Path, old: str = "    index_k = d\n") -> dict[str, Any]:
    hunk = {"old_start": 2, "old_count": 1, "new_start": 2, "new_count": 1,
            "lines": [["-", old], ["+", "    index_k = d * 2\n"]]}
    fix = {
        "name": "index-k-bytes", "version": 1, "title": "Count index-K at two bytes", "requires": [],
        "release": {"root": "sglang", "versions": ["0.5.21"]},
        "patches": [{"file": "0001-x.patch", "sha256": "0" * 64}],
        "files": [{"root": "sglang", "path": "python/sglang/srt/pool.py", "patch": "0001-x.patch",
                   "op": "modify", "mode": None, "hunks": [hunk]}],
        "preconditions": [],
        "verification": [{"kind": "python-syntax", "root": "sglang", "path": "python/sglang/srt/pool.py"}],
        "actions": {"purge_pycache": True}, "scripts": {}, "rollback": {"strategy": "restore"},
    }
    return {"format": 1, "op": op, "dry_run": False, "force": False, "roots": {"sglang": str(root)},
            "state_root": "sglang", "python": None, "lock_timeout": 5.0, "fixes": [fix]}


def fix_states(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["name"], f["state"]) for f in result["status"]["fixes"]]


@pytest.mark.parametrize("version", [None, "3.8"])
def test_real_engine_status_and_apply_over_ssh(sshd: SshServer, tmp_path: Path, version: str | None) -> None:
    python = "python3" if version is None else interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} installed to check the oldest supported host interpreter")
    root = sglang_tree(tmp_path)
    spec = spec_for(sshd)

    before = run_engine(spec, real_request("status", root), python=python)
    assert before["ok"] is True, before["error"]
    assert before["status"]["state_root"] == str(root)
    assert fix_states(before) == [("index-k-bytes", "not-applied")]

    applied = run_engine(spec, real_request("apply", root), python=python)
    assert applied["ok"] is True, applied["error"]
    assert [f["outcome"] for f in applied["fixes"]] == ["applied"]
    assert "index_k = d * 2" in (root / "python/sglang/srt/pool.py").read_text()

    after = run_engine(spec, real_request("status", root), python=python)
    assert fix_states(after) == [("index-k-bytes", "applied")]


def test_real_engine_fails_over_ssh_as_it_does_locally(sshd: SshServer, tmp_path: Path) -> None:
    from patchkit.engine import run as run_locally

    here, there = sglang_tree(tmp_path / "local"), sglang_tree(tmp_path / "remote")
    stale = "    index_k = head_dim\n"  # the hunk's context is not in the file: a conflict

    local = run_locally(real_request("apply", here, old=stale))
    remote = run_engine(spec_for(sshd), real_request("apply", there, old=stale))

    assert remote["ok"] is False and remote["error"]["type"] == "ConflictError"
    assert remote.pop("tree")["ino"] != local.pop("tree")["ino"]  # two trees: each its own
    assert json.loads(json.dumps(remote).replace(str(there), "<root>")) == json.loads(
        json.dumps(local).replace(str(here), "<root>")
    )
    assert isinstance(errors.error_from_dict(remote["error"]), errors.ConflictError)


@pytest.mark.parametrize("version", [None, "3.8"])
def test_a_regex_grep_runs_its_worker_from_the_shipped_sources(sshd: SshServer, tmp_path: Path,
                                                               version: str | None) -> None:
    """The regex worker is the engine's module ``regexworker``; on a host it exists only in
    the agent's memory, and the worker process still gets its source."""
    python = "python3" if version is None else interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} installed to check the oldest supported host interpreter")
    root = sglang_tree(tmp_path)
    request = real_request("apply", root)
    grep = {"kind": "grep", "root": "sglang", "path": "python/sglang/srt/pool.py",
            "pattern": r"index_k = d \* \d$", "regex": True, "count": 1}
    request["fixes"][0]["verification"].append(grep)
    applied = run_engine(spec_for(sshd), request, python=python)
    assert applied["ok"] is True, applied["error"]
    assert [v["ok"] for v in applied["fixes"][0]["verification"]] == [True, True]

    wrong = real_request("apply", sglang_tree(tmp_path / "again"))
    wrong["fixes"][0]["verification"].append(dict(grep, pattern=r"index_k = d \* 3$"))
    failed = run_engine(spec_for(sshd), wrong, python=python)
    assert failed["ok"] is False and failed["error"]["type"] == "VerificationFailed"
