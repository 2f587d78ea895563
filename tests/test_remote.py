"""Remote targets behave like local ones, against a real sshd on 127.0.0.1.

The "host" is this machine over loopback and its roots are temporary directories, so the same
scenario runs on a :class:`LocalTarget` and a :class:`RemoteTarget` and the results can be
compared byte for byte once paths and times are normalised. Then: one connection per command,
the connection cut (client killed, sshd's session killed, host process killed) never leaves
the host half-applied, and every transport failure has its own exit code and writes nothing.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from click.testing import CliRunner

from patchkit import api, errors
from patchkit.catalog import Catalog
from patchkit.cli.main import main
from patchkit.targets.remote import RemoteTarget
from patchkit.targets import LocalTarget, Target
from patchkit.targets.transport import SshSpec
from tests.fixtures.sshd import SshServer
from tests.fixtures.procs import alive

pytestmark = pytest.mark.ssh

SAMPLES = Path(__file__).parent / "samples"
REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
POOL = "python/sglang/srt/pool.py"


# -- helpers ---------------------------------------------------------------------------------


_TEMPLATE: list[Path] = []


def _template() -> Path:
    """The sample roots with ``sglang`` committed, built once per session (the fault sweeps
    make a fresh tree per kill: a copy costs no git process)."""
    if not _TEMPLATE:
        where = Path(tempfile.mkdtemp(prefix="patchkit-sample-tree-"))
        atexit.register(shutil.rmtree, where, True)
        shutil.copytree(SAMPLES / "tree", where / "tree")
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "release 0.5.21"]):
            subprocess.run(["git", *args], cwd=where / "tree" / "sglang", check=True,
                           capture_output=True)
        _TEMPLATE.append(where / "tree")
    return _TEMPLATE[0]


def make_tree(base: Path) -> dict[str, str]:
    """The sample roots (a git checkout ``sglang`` and a ``serve`` folder) under ``base``."""
    shutil.copytree(_template(), base, symlinks=True)
    return {"sglang": str(base / "sglang"), "serve": str(base / "serve")}


def snapshot(roots: dict[str, str], *, state: bool = False) -> dict[str, str]:
    """sha256 of every file under the roots (``.git`` aside; ``.patchkit`` only if ``state``)."""
    out = {}
    for name, root in roots.items():
        for path in sorted(Path(root).rglob("*")):
            rel = path.relative_to(root)
            if rel.parts[0] == ".git" or (rel.parts[0] == ".patchkit" and not state):
                continue
            if path.is_file() or path.is_symlink():
                out[f"{name}:{rel}"] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[f"{name}:{rel}/"] = "dir"
    return out


class Ssh:
    """How tests reach the server: a counting ssh program plus options, for the API and CLI."""

    def __init__(self, server: SshServer, workdir: Path) -> None:
        self.server = server
        self.log = workdir / "ssh-invocations"
        self.program = workdir / "ssh-counting"
        # -F none: never read a user's or the system's ssh config; exec: the pid is ssh's own.
        self.program.write_text(f'#!/bin/sh\necho $$ >> "{self.log}"\nexec ssh -F none "$@"\n')
        self.program.chmod(0o755)
        opts = server.ssh_options()
        self.settings = [opts[i + 1] for i, o in enumerate(opts) if o == "-o"]

    def count(self) -> int:
        return len(self.log.read_text().split()) if self.log.exists() else 0

    def last_pid(self) -> int:
        return int(self.log.read_text().split()[-1])

    def merged(self, settings: tuple[str, ...]) -> list[str]:
        """``settings`` in place of the defaults with the same key (IdentityFile adds up in ssh)."""
        keys = {s.split("=", 1)[0] for s in settings}
        return [*settings, *(s for s in self.settings if s.split("=", 1)[0] not in keys)]

    def spec(self, *settings: str) -> SshSpec:
        options = tuple(x for s in self.merged(settings) for x in ("-o", s))
        return SshSpec(self.server.host, self.server.user, self.server.port, options, str(self.program))

    def url(self, path: str, port: int | None = None) -> str:
        return f"ssh://{self.server.user}@{self.server.host}:{port or self.server.port}{path}"

    def cli_args(self, *settings: str) -> list[str]:
        args = ["--ssh-program", str(self.program)]
        for setting in self.merged(settings):
            args += ["--ssh-option", setting]
        return args


@pytest.fixture
def ssh(sshd: SshServer, tmp_path: Path) -> Ssh:
    return Ssh(sshd, tmp_path)


def target_args(ssh: Ssh, kind: str, roots: dict[str, str], *settings: str) -> list[str]:
    """``--target``/``--root``/``--python`` (and the ssh options) for a local or remote run."""
    main_root = roots["sglang"] if kind == "local" else ssh.url(roots["sglang"])
    args = ["--target", main_root, "--python", PY]
    for name, path in roots.items():
        if name != "sglang":
            args += ["--root", f"{name}={path}"]
    return args + (ssh.cli_args(*settings) if kind == "remote" else [])


def cli(args: list[str]) -> tuple[int, str, str]:
    """``patchkit ARGS`` in-process through the real CLI boundary; (exit code, stdout, stderr)."""
    runner = CliRunner()
    with runner.isolation(env={"COLUMNS": "2000"}) as streams:  # no folding of long paths
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        sys.stdout.flush()
        sys.stderr.flush()
    return code, streams[0].getvalue().decode(), streams[1].getvalue().decode()


def cli_process(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``python -m patchkit ARGS`` as a child process (for killing and exit codes)."""
    return subprocess.run([PY, "-m", "patchkit", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, **kwargs)


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


#: the note repeating a run's catalog and target options (docs/cli.md, Piped output)
_OPTIONS_NOTE = re.compile(r"^note: run the patchkit commands above with this run's options: .*$",
                           re.M)


def normalise(output: str, roots: dict[str, str]) -> Any:
    """A --json output with root paths, times, transaction ids and the target made neutral."""
    for name, path in sorted(roots.items(), key=lambda item: -len(item[1])):
        output = output.replace(path, f"<{name}>")
    data = json.loads(_TIME.sub("<time>", output))
    txns = set(re.findall(r'"txn": "([^"]+)"', output))

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("<target>" if k == "target" else "<tree>" if k == "tree"
                        else "<options>" if k == "options" else walk(v))
                    for k, v in value.items()}  # (tree: the state root's identity, its inode;
            # options: this run's target options as given, the ssh ones too)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            for txn in txns:
                value = value.replace(txn, "<txn>")
        return value

    return walk(data)


def wait_until(predicate: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.02)


def states(result: Any) -> dict[str, str]:
    return {s.name: s.state for s in result.status}


# -- the same scenario on a local and a remote target ----------------------------------------


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_apply_status_verify_rollback_behave_the_same(kind: str, ssh: Ssh, tmp_path: Path) -> None:
    roots = make_tree(tmp_path / "tree")
    target: Target = (LocalTarget(roots, PY, "local") if kind == "local"
                      else RemoteTarget(ssh.spec(), roots, PY))
    catalog = Catalog(SAMPLES / "catalog")
    original = snapshot(roots)

    dry = api.apply(catalog, target, ["pool-guard"], dry_run=True, with_deps=True)
    assert [(f.name, f.outcome) for f in dry.fixes] == [
        ("index-k-bytes", "would-apply"), ("pool-guard", "would-apply")]
    assert "+    index_k = head_dim * 2" in dry.fixes[0].files[0].diff
    assert snapshot(roots, state=True) == original  # not even .patchkit/

    applied = api.apply(catalog, target, ["pool-guard"], with_deps=True)
    assert [(f.name, f.outcome) for f in applied.fixes] == [
        ("index-k-bytes", "applied"), ("pool-guard", "applied")]
    checks = [c for f in applied.fixes for c in f.verification]
    assert len(checks) == 6 and all(c.ok for c in checks)
    assert "index_k = head_dim * 2" in Path(roots["sglang"], POOL).read_text()
    assert "SGLANG_INDEX_K_DTYPE=bf16" in Path(roots["serve"], "serve.sh").read_text()
    patched = snapshot(roots)

    again = api.apply(catalog, target, ["index-k-bytes"])
    assert [f.outcome for f in again.fixes] == ["already-applied"]
    found = states(api.status(catalog, target))
    # (index-k-bytes's own state is left out: pool.py was changed again by pool-guard after it)
    assert (found["pool-guard"], found["old-index-k"]) == ("applied", "not-applied")
    verified = api.verify(catalog, target, ["index-k-bytes", "pool-guard"])
    assert [f.outcome for f in verified.fixes] == ["verified", "verified"]

    with pytest.raises(errors.PreconditionFailed):  # pool-guard still depends on it
        api.rollback(catalog, target, ["index-k-bytes"])
    serve = Path(roots["serve"], "serve.sh")
    ours = serve.read_bytes()
    serve.write_text("#!/bin/sh\necho edited by hand\n")
    with pytest.raises(errors.DriftError) as drift:
        api.rollback(catalog, target, ["pool-guard"])
    assert "serve.sh" in drift.value.message
    assert states(api.status(catalog, target))["pool-guard"] == "drifted"
    serve.write_bytes(ours)
    rolled = api.rollback(catalog, target, ["pool-guard", "index-k-bytes"])
    assert [f.outcome for f in rolled.fixes] == ["rolled-back", "rolled-back"]
    assert snapshot(roots) == original
    assert snapshot(roots) != patched
    assert set(states(api.status(catalog, target)).values()) == {"not-applied"}


def test_cli_output_is_the_same_for_local_and_remote_with_one_connection_each(
    ssh: Ssh, tmp_path: Path
) -> None:
    commands = [  # (arguments, --json?)
        (["apply", "pool-guard", "--with-deps", "--dry-run"], True),
        (["apply", "pool-guard", "--dry-run"], False),  # refused: needs index-k-bytes first
        (["apply", "pool-guard", "--with-deps"], True),
        (["apply", "index-k-bytes"], True),
        (["status", "--all"], True),
        (["verify", "index-k-bytes", "pool-guard"], True),
        (["verify", "pool-guard"], False),
        (["rollback", "index-k-bytes"], True),  # refused: pool-guard depends on it
        (["rollback", "pool-guard", "index-k-bytes", "--dry-run"], True),
        (["rollback", "pool-guard", "index-k-bytes"], True),
        (["rollback", "pool-guard"], False),  # not applied any more: nothing to do, exit 0
        (["status"], True),
    ]
    seen: dict[str, list[tuple[int, Any]]] = {}
    for kind in ("local", "remote"):
        roots = make_tree(tmp_path / kind)
        original = snapshot(roots)
        here = ", ".join(f"{n}={p}" for n, p in roots.items())
        description = here if kind == "local" else f"{ssh.url('')} ({here})"
        seen[kind] = []
        for command, as_json in commands:
            before = ssh.count()
            code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), *command,
                                  *(["--json"] if as_json else []), *target_args(ssh, kind, roots)])
            if as_json:
                seen[kind].append((code, normalise(out, roots)))
                assert json.loads(out)["target"] == description
            else:  # what a person reads: the same but for the target's name
                said = (out + err).replace(description, "<target>")
                for name, path in roots.items():
                    said = said.replace(path, f"<{name}>")
                said = _OPTIONS_NOTE.sub("note: <this run's options>", said)  # as given
                seen[kind].append((code, _TIME.sub("<time>", said)))
                assert "<target>" in said or "error: " in said
            if kind == "remote":
                assert ssh.count() - before == 1, (command, "ssh connections")
        assert snapshot(roots) == original
    for (command, _), local, remote in zip(commands, seen["local"], seen["remote"]):
        assert remote == local, command
    assert [code for code, _ in seen["local"]] == [0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]


def test_ssh_options_and_program_reach_url_and_named_targets(tmp_path: Path) -> None:
    from patchkit.catalog.config import load_config
    from patchkit.targets import resolve_target

    url = resolve_target("ssh://deploy@gpu1:2200/srv/sglang", ["serve=/root"],
                         ssh_options=["ProxyJump=bastion", "IdentityFile /k"], ssh_program="/bin/ssh-x")
    assert isinstance(url, RemoteTarget)
    assert url.spec.options == ("-o", "ProxyJump=bastion", "-o", "IdentityFile /k")
    assert url.spec.program == "/bin/ssh-x" and url.roots == {"sglang": "/srv/sglang", "serve": "/root"}

    config = tmp_path / "patchkit.toml"
    config.write_text('[targets.gpu]\nhost = "gpu1"\npath = "/srv"\nssh_options = ["Port=22"]\n'
                      'ssh_program = "/bin/named-ssh"\n')
    named = resolve_target("gpu", (), config=load_config(config), ssh_options=["Port=2200"])
    assert named.spec.options == ("-o", "Port=2200", "-o", "Port=22")  # ssh keeps the first
    assert named.spec.program == "/bin/named-ssh"


@pytest.mark.parametrize("option", ["-oProxyCommand=touch /tmp/x", "ProxyJump", "=x", "Port=22\nHost=x", ""])
def test_bad_ssh_option_is_a_usage_error(option: str) -> None:
    code, _out, err = cli(["apply", "x", "--target", "ssh://h/srv", "--ssh-option", option])
    assert code == errors.EXIT_USAGE and "--ssh-option" in err and "KEY=VALUE" in err


def test_ssh_options_are_refused_for_a_local_target(tmp_path: Path) -> None:
    code, _out, err = cli(["status", "--target", str(tmp_path), "--ssh-option", "Port=22"])
    assert code == errors.EXIT_USAGE and "remote targets only" in err


# -- the connection cut in the middle of an apply --------------------------------------------

# A verification that tells the test the engine's pid (its parent), then holds the run inside
# the transaction until the test writes the exit code it should end with into "release".
GATE = """import os, sys, time
signals = sys.argv[1]
with open(os.path.join(signals, "verifying"), "w") as f:
    f.write(str(os.getppid()))
release = os.path.join(signals, "release")
deadline = time.monotonic() + 60
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(int(open(release).read() or 0))
"""


def gated_catalog(base: Path) -> tuple[Path, Path]:
    """The sample catalog whose index-k-bytes also runs :data:`GATE`; (catalog, signal dir)."""
    catalog, signals = base / "catalog", base / "signals"
    shutil.copytree(SAMPLES / "catalog", catalog)
    signals.mkdir()
    manifest = catalog / "manifests/index-k-bytes.toml"
    manifest.write_text(manifest.read_text() + (
        "\n[[verification]]\nkind = \"command\"\nname = \"held by the test\"\n"
        f"argv = [\"{{python}}\", \"-c\", {json.dumps(GATE)}, {json.dumps(str(signals))}]\n"))
    return catalog, signals


def start_gated_apply(ssh: Ssh, roots: dict[str, str], catalog: Path, signals: Path,
                      *extra: str, **popen: Any) -> tuple[subprocess.Popen[str], int]:
    """A CLI apply on the remote target, returned once the host-side engine is held in its
    verification (after every file was written); (client process, host engine pid)."""
    client = subprocess.Popen(
        [PY, "-m", "patchkit", "--catalog", str(catalog), "apply", "index-k-bytes",
         *target_args(ssh, "remote", roots), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, **popen)
    verifying = signals / "verifying"
    wait_until(lambda: verifying.exists() and verifying.read_text() != "", "the host-side verification")
    engine = int(verifying.read_text())
    assert "index_k = head_dim * 2" in Path(roots["sglang"], POOL).read_text()  # written...
    assert Path(roots["sglang"], ".patchkit/journal.json").exists()  # ...under a journal
    return client, engine


def finish_on_the_host(client: subprocess.Popen[str], engine: int, signals: Path, exit_code: int,
                       stdout: list[str] | None = None) -> str:
    """The client has lost its connection; let the host-side engine end the transaction.
    Returns the client's stderr (its stdout appended to ``stdout``)."""
    out, err = client.communicate(timeout=60)
    if stdout is not None:
        stdout.append(out)
    assert client.returncode == errors.EXIT_CONNECTION_LOST, err
    assert "patchkit status" in err
    assert alive(engine), "the host-side engine must outlive the connection"
    staged = signals / "release.tmp"  # renamed into place: the gate never reads it empty
    staged.write_text(str(exit_code))
    staged.rename(signals / "release")
    wait_until(lambda: not alive(engine), "the host-side engine to end its transaction")
    return err


def assert_settled(ssh: Ssh, roots: dict[str, str], catalog: Path) -> dict[str, str]:
    """The next remote status: no recovery needed, no journal, the fixes' states."""
    result = api.status(Catalog(catalog), RemoteTarget(ssh.spec(), roots, PY))
    assert result.recovered == ()
    assert result.raw["status"]["journal"] is None
    sglang = Path(roots["sglang"])
    assert not (sglang / ".patchkit/journal.json").exists()
    txn = sglang / ".patchkit/txn"
    assert not txn.exists() or list(txn.iterdir()) == []  # no transaction scratch left
    assert not list(sglang.rglob("*.patchkit-tmp"))
    return states(result)


def test_killed_ssh_client_the_host_finishes_applied_and_verified(ssh: Ssh, tmp_path: Path) -> None:
    roots = make_tree(tmp_path / "tree")
    catalog, signals = gated_catalog(tmp_path)
    client, engine = start_gated_apply(ssh, roots, catalog, signals)

    os.kill(ssh.last_pid(), signal.SIGKILL)  # the client's ssh process: the connection is gone
    err = finish_on_the_host(client, engine, signals, 0)

    assert "ssh://" in err and "was killed" in err
    # the message's own status command, run as written, shows what the host did
    status = shlex.split(err.split("Run `", 1)[1].split("`", 1)[0])
    assert status[:2] == ["patchkit", "status"] and ssh.url(roots["sglang"]) in status
    code, out, _ = cli(["--catalog", str(catalog), *status[1:], "--json"])
    assert code == 0
    assert {f["name"]: f["state"] for f in json.loads(out)["status"]["fixes"]}["index-k-bytes"] == "applied"
    assert assert_settled(ssh, roots, catalog)["index-k-bytes"] == "applied"
    record = json.loads(Path(roots["sglang"], ".patchkit/state.json").read_text())["fixes"][0]
    assert [c["ok"] for c in record["verification"]] == [True, True, True]
    assert "index_k = head_dim * 2" in Path(roots["sglang"], POOL).read_text()


#: How each interrupt reaches the client: Ctrl-C, the terminal's whole process group (ssh
#: too); SIGTERM (a CI job's timeout, ``kill``) and SIGHUP (a dropped terminal), the client alone.
INTERRUPTS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGTERM, id="SIGTERM"),
              pytest.param(signal.SIGHUP, id="SIGHUP")]


def interrupt(client: subprocess.Popen[str], signum: int) -> None:
    if signum == signal.SIGINT:
        os.killpg(client.pid, signum)  # the client's own session, started by this test
    else:
        os.kill(client.pid, signum)


@pytest.mark.parametrize("signum", INTERRUPTS)
def test_interrupt_after_the_request_reached_the_host_is_connection_lost(
    signum: int, ssh: Ssh, tmp_path: Path
) -> None:
    """^C on the terminal (SIGINT to the client and its ssh), SIGTERM or SIGHUP to the client
    does not stop the host, which finishes the run: so not exit 130/143/129 ("rolled back")
    but 14, the command that shows the host's outcome, and the error in ``--json``. Before,
    SIGTERM and SIGHUP killed the client without a word while the host applied the fix."""
    roots = make_tree(tmp_path / "tree")
    catalog, signals = gated_catalog(tmp_path)
    client, engine = start_gated_apply(ssh, roots, catalog, signals, "--json", start_new_session=True)

    interrupt(client, signum)
    out: list[str] = []
    err = finish_on_the_host(client, engine, signals, 0, out)

    name = signal.Signals(signum).name
    assert f"interrupted by {name} after the request reached the engine" in err, err
    assert f"patchkit status --target {ssh.url(roots['sglang'])}" in err, err
    data = json.loads(out[0])
    assert data["ok"] is False and data["error"]["type"] == "ConnectionLost", data
    assert assert_settled(ssh, roots, catalog)["index-k-bytes"] == "applied"


@pytest.mark.parametrize("signum", INTERRUPTS)
def test_interrupt_before_the_agent_starts_is_130_and_nothing_runs(
    signum: int, ssh: Ssh, tmp_path: Path
) -> None:
    """Before the go-ahead, an interrupt ends the run with 128 + the signal and says that
    nothing ran on the host (not that the host puts back what it wrote), in ``--json`` too."""
    roots = make_tree(tmp_path / "tree")
    original = snapshot(roots, state=True)
    pid_file, release = tmp_path / "held-pid", tmp_path / "held-release"
    held = tmp_path / "held-python"  # a host slow to start the agent, holding it until released
    held.write_text(f'#!/bin/sh\necho $$ > "{pid_file}"\ni=0\n'
                    f'while [ ! -e "{release}" ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done\n'
                    f'exec "{PY}" "$@"\n')
    held.chmod(0o755)
    args = [*target_args(ssh, "remote", roots)]
    args[args.index("--python") + 1] = str(held)
    client = subprocess.Popen([PY, "-m", "patchkit", "--catalog", str(SAMPLES / "catalog"), "apply",
                               "index-k-bytes", *args, "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", "the held python")

    interrupt(client, signum)
    out, err = client.communicate(timeout=60)

    assert client.returncode == 128 + signum, err
    name = signal.Signals(signum).name
    said = f"by {name} before the request reached the engine on {ssh.url('')}"
    assert said in err and "nothing ran on the host" in err, err
    assert "puts back" not in err and "journal" not in err, err
    assert err.startswith("error: "), err  # no blank line first (click's, on Ctrl-C)
    data = json.loads(out)
    assert data["ok"] is False and said in data["error"]["message"], data
    assert data["error"]["details"]["signal"] == name
    host = int(pid_file.read_text())
    release.touch()
    wait_until(lambda: not alive(host), "the late agent on the host to end")
    assert snapshot(roots, state=True) == original


def test_killed_sshd_session_the_host_rolls_back_when_verification_fails(
    ssh: Ssh, tmp_path: Path
) -> None:
    roots = make_tree(tmp_path / "tree")
    original = snapshot(roots)
    catalog, signals = gated_catalog(tmp_path)
    before = set(ssh.server.session_processes())
    client, engine = start_gated_apply(ssh, roots, catalog, signals)

    session = [p for p in set(ssh.server.session_processes()) - before
               if Path(f"/proc/{p}/comm").read_text().strip() == "sshd"]
    assert session and engine not in session
    for pid in session:  # the server side of this connection dies; the engine is left running
        os.kill(pid, signal.SIGKILL)
    finish_on_the_host(client, engine, signals, 1)  # and its verification now fails

    # rolled back by the host-side engine itself: the next status has nothing to recover
    assert assert_settled(ssh, roots, catalog)["index-k-bytes"] == "not-applied"
    assert snapshot(roots) == original


@pytest.mark.parametrize(("fault", "outcome"), [("rename:2", "rolled-back"), ("cleanup:1", "completed")])
def test_host_process_killed_mid_apply_is_recovered_by_the_next_status(
    ssh: Ssh, tmp_path: Path, fault: str, outcome: str
) -> None:
    roots = make_tree(tmp_path / "tree")
    original = snapshot(roots)
    catalog = SAMPLES / "catalog"
    args = ["--catalog", str(catalog), "apply", "pool-guard", "--with-deps",
            *target_args(ssh, "remote", roots, f"SetEnv=PATCHKIT_FAULT={fault}")]

    run = cli_process(args)

    assert run.returncode == errors.EXIT_CONNECTION_LOST, run.stderr
    assert Path(roots["sglang"], ".patchkit/journal.json").exists()  # the engine died in the txn
    if fault.startswith("rename"):  # pool.py was written, serve.sh not yet: half-applied on disk
        assert snapshot(roots)["sglang:" + POOL] != original["sglang:" + POOL]
        assert snapshot(roots)["serve:serve.sh"] == original["serve:serve.sh"]
    code, out, _err = cli(["--catalog", str(catalog), "status", "--json",
                           *target_args(ssh, "remote", roots)])
    assert code == 0
    recovered = json.loads(out)["recovered"]
    assert [(r["op"], r["fixes"], r["outcome"]) for r in recovered] == [
        ("apply", ["index-k-bytes", "pool-guard"], outcome)]
    found = assert_settled(ssh, roots, catalog)
    if outcome == "rolled-back":
        assert snapshot(roots) == original
        assert set(found.values()) == {"not-applied"}
    else:
        assert found["pool-guard"] == "applied"
        assert "SGLANG_INDEX_K_DTYPE=bf16" in Path(roots["serve"], "serve.sh").read_text()


# -- refusals: each its own exit code, nothing written ---------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:  # free a moment ago, and nobody listens on it
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bad_known_hosts(ssh: Ssh, tmp_path: Path) -> str:
    kind, key = Path(f"{ssh.server.new_key('impostor_host_key')}.pub").read_text().split()[:2]
    path = tmp_path / "known_hosts"
    path.write_text(f"[{ssh.server.host}]:{ssh.server.port} {kind} {key}\n")
    return f"UserKnownHostsFile={path}"


@pytest.mark.parametrize(
    ("case", "code", "said"),
    [
        ("unreachable", errors.EXIT_UNREACHABLE, "cannot reach ssh://"),
        ("authentication", errors.EXIT_AUTH, "authorized_keys"),
        ("host-key", errors.EXIT_HOSTKEY, "does not match the one in known_hosts"),
        ("python", errors.EXIT_REMOTE_PYTHON, "/nonexistent/python"),
        ("root-missing", errors.EXIT_TARGET, "does not exist"),
    ],
)
def test_refusals_have_their_own_exit_code_and_write_nothing(
    ssh: Ssh, tmp_path: Path, case: str, code: int, said: str
) -> None:
    roots = make_tree(tmp_path / "tree")
    original = snapshot(roots, state=True)
    settings: list[str] = []
    url_roots, port, python = dict(roots), None, PY
    if case == "unreachable":
        port = closed_port()
    elif case == "authentication":
        settings = [f"IdentityFile={ssh.server.new_key('stranger_key')}"]
    elif case == "host-key":
        settings = [bad_known_hosts(ssh, tmp_path)]
    elif case == "python":
        python = "/nonexistent/python"
    else:
        url_roots["sglang"] = str(tmp_path / "no-such-checkout")
    args = ["--target", ssh.url(url_roots["sglang"], port), "--root", f"serve={roots['serve']}",
            "--python", python, *ssh.cli_args(*settings)]

    run = cli_process(["--catalog", str(SAMPLES / "catalog"), "apply", "pool-guard", "--with-deps", *args])

    assert run.returncode == code, run.stderr
    assert said in run.stderr and run.stderr.startswith("error: ")
    assert "Traceback" not in run.stderr
    if case == "root-missing":  # the host's path, not one here: said where (a trial)
        assert run.stderr.startswith("error: on ssh://"), run.stderr
    assert snapshot(roots, state=True) == original
    assert not Path(url_roots["sglang"]).exists() or not Path(url_roots["sglang"], ".patchkit").exists()
    assert ssh.count() == 1  # one attempt, no retries behind the user's back


def read_only(directory: Path) -> Callable[[], None]:
    """A directory even root cannot write to: a read-only bind mount (as tests/engine does)."""
    if subprocess.run(["mount", "--bind", str(directory), str(directory)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here, so root on the host cannot be denied writing")
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)], capture_output=True).returncode:
        subprocess.run(["umount", str(directory)], check=True)
        pytest.skip("cannot remount read-only here, so root on the host cannot be denied writing")
    return lambda: subprocess.run(["umount", str(directory)], check=True)


@pytest.fixture
def read_only_roots(tmp_path: Path) -> Iterator[dict[str, str]]:
    roots = make_tree(tmp_path / "tree")
    undo = read_only(Path(roots["sglang"]))
    try:
        yield roots
    finally:
        undo()


def test_read_only_remote_root_is_permission_denied_like_a_local_one(
    ssh: Ssh, read_only_roots: dict[str, str]
) -> None:
    roots = read_only_roots
    original = snapshot(roots, state=True)
    runs = {kind: cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", "--json",
                       *target_args(ssh, kind, roots)]) for kind in ("local", "remote")}

    (local_code, local_out, _), (remote_code, remote_out, remote_err) = runs["local"], runs["remote"]
    assert remote_code == local_code == errors.EXIT_PERMISSION
    assert normalise(remote_out, roots) == normalise(local_out, roots)
    assert json.loads(remote_out)["error"]["type"] == "PermissionDenied"
    assert f"no write permission on {roots['sglang']}" in remote_err
    assert snapshot(roots, state=True) == original


# -- the real SGLang release -----------------------------------------------------------------


@pytest.mark.network  # the 0.5.21 release comes from the registry once, then from the cache
def test_status_of_a_real_sglang_checkout_is_the_same_remote(ssh: Ssh, sglang_tree: Path, tmp_path: Path) -> None:
    serve = tmp_path / "serve"
    serve.mkdir()
    shutil.copy2(REPO / "docs/examples/serve_dsv4_prefill.sh", serve)
    roots = {"sglang": str(sglang_tree), "serve": str(serve)}
    original = snapshot(roots, state=True)

    runs = {kind: cli(["--catalog", str(REPO), "status", "--all", "--json",
                       *target_args(ssh, kind, roots)]) for kind in ("local", "remote")}

    assert runs["remote"][0] == runs["local"][0] == 0
    remote, local = (normalise(runs[k][1], roots) for k in ("remote", "local"))
    assert remote == local
    found = {f["name"]: f["state"] for f in remote["status"]["fixes"]}
    assert found["dsv4-bf16-index-k"] == "not-applied"  # a clean 0.5.21 has none of them
    assert found["prefill-hicache-off"] == "not-applied"
    assert snapshot(roots, state=True) == original  # status on a fresh target creates nothing


def test_a_remote_venv_root_is_answered_with_its_interpreter(ssh: Ssh, tmp_path: Path) -> None:
    """A venv root works locally (patchkit asks its interpreter), not on a host, where the
    engine sees only the path: its refusal used to suggest "a venv root", the very thing
    given. It names the venv's interpreter as the target to give instead."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    run = cli_process(["--catalog", str(SAMPLES / "catalog"), "status",
                       *target_args(ssh, "remote", {"sglang": str(venv)})])
    assert run.returncode == errors.EXIT_TARGET, (run.stdout, run.stderr)
    said = " ".join(run.stderr.split())
    assert f"{venv} is a virtualenv" in said and f"python:{venv}/bin/python" in said, said
    assert "or a venv root" not in said


@pytest.mark.parametrize("kind", ["local", "remote"])
@pytest.mark.parametrize("command", [["status"], ["rollback", "index-k-bytes"],
                                     ["verify", "index-k-bytes"], ["apply", "index-k-bytes"],
                                     ["undo"]], ids=lambda c: c[0])
def test_a_directory_without_sglang_is_refused_by_every_command(
        kind: str, command: list[str], ssh: Ssh, tmp_path: Path) -> None:
    """A venv root or an empty directory given as the sglang root: exit 5 naming what was
    looked for, not "no fix applied" (the engine says it on the host too). On a host only
    status said so: a trial's mistyped host path got "rolled-back ... nothing to roll back",
    exit 0, while the real tree kept the fix (and exit 1 from verify, apply and undo)."""
    empty = tmp_path / "not-sglang"
    empty.mkdir()
    run = cli_process(["--catalog", str(SAMPLES / "catalog"), *command,
                       *target_args(ssh, kind, {"sglang": str(empty)})])
    assert run.returncode == errors.EXIT_TARGET, (run.stdout, run.stderr)
    assert "no `sglang` package found in" in run.stderr and str(empty) in run.stderr
    assert list(empty.iterdir()) == []


def test_a_remote_run_that_waits_for_the_lock_says_so_while_it_waits(ssh: Ssh, tmp_path: Path) -> None:
    """Another run holds the host's lock: the engine there says so on the session, and the
    client's progress line names the host, the root and the holder as the wait begins, as a
    local target's does (before, a remote run sat silent until LockBusy); the agent's line is
    not left in what ssh's stderr is kept for."""
    roots = make_tree(tmp_path / "tree")
    holder = subprocess.Popen(
        [PY, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY "
         "| os.O_DIRECTORY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
         "time.sleep(60)", roots["sglang"]], stdout=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        assert holder.stdout.readline() == "held\n"  # type: ignore[union-attr]
        original = snapshot(roots, state=True)
        run = cli_process(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes",
                           "--lock-timeout", "2", *target_args(ssh, "remote", roots)],
                          env=dict(os.environ, PATCHKIT_PROGRESS_AFTER="0"))
        assert run.returncode == errors.EXIT_LOCKED, run.stdout + run.stderr
        said = " ".join(run.stderr.split())
        assert (f"{ssh.url('')}: waiting for the lock on {roots['sglang']}: another patchkit run"
                in said), said
        assert "waiting up to 2s (--lock-timeout)" in said and "agent-says" not in said, said
        assert snapshot(roots, state=True) == original
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # this test's own process group, by its PID
        holder.wait(timeout=30)
        holder.stdout.close()  # type: ignore[union-attr]


def test_an_interrupted_client_stops_its_hook_on_the_host(ssh: Ssh, tmp_path: Path) -> None:
    """SIGTERM to the client while an ssh:// target's --after-cmd runs: the client said it
    was interrupted, and the hook ran on to its end on the host, after the `patchkit undo`
    the message advises (a new-user trial). The hook's wrapper on the host watches the
    session the client holds open, and stops the hook's process group when it ends, as an
    interrupt does a local hook's."""
    roots = make_tree(tmp_path / "tree")
    pidfile, done = tmp_path / "hook.pid", tmp_path / "hook.done"
    hook = f"echo $$ > {pidfile}; sleep 20; touch {done}"
    client = subprocess.Popen(
        [PY, "-m", "patchkit", "--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes",
         *target_args(ssh, "remote", roots), "--after-cmd", hook],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "", "the hook on the host")
    shell = int(pidfile.read_text())
    client.send_signal(signal.SIGTERM)
    _out, err = client.communicate(timeout=60)
    assert client.returncode == 143 and "--after-cmd" in err, err
    wait_until(lambda: not alive(shell), "the hook's shell on the host to be stopped")
    time.sleep(0.5)
    assert not done.exists()
