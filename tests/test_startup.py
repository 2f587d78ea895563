"""What keeps a run's start cheap (issue 7), asserted as behaviour, never as timings.

apply and rollback have a fast path that reads the command line without click; it must give
the command exactly what click would, and hand every other command line to click. The model's
and results' records skip the generated dataclass methods but must still act as frozen
dataclasses.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from patchkit.cli import apply as cli_apply
from patchkit.cli import rollback as cli_rollback
from patchkit.cli import status as cli_status
from patchkit.cli import verify as cli_verify
from patchkit.cli.common import State, one_value
from patchkit.cli.main import fast_command
from patchkit.catalog.manifest import load_manifest
from patchkit.catalog.model import Check, Fix, Upstream
from patchkit.results import CheckResult, OpResult
from tests.test_cli import INDEX_K, POOL, Env, env, git  # noqa: F401  (fixtures)
from tests.test_client_speed import run_counting_imports

CATALOG = Path(__file__).parent / "samples" / "catalog"

#: Modules a fast-path apply or rollback must not load (click and what only click loads).
NOT_ON_FAST_PATH = ("click", "uuid", "platform", "gettext", "git", "rich", "tomlkit")
#: Modules no --json apply/status/rollback loads (unidiff is not one of them: a status reads
#: every series, in one request of full fixes).
NEVER = ("git", "rich", "tomlkit")
#: The transaction module: loaded by a write, and by a read-only run only to recover.
ONLY_WHEN_NEEDED = ("patchkit.engine.txn",)


def _click_reading(module: Any, args: list[str]) -> tuple[dict[str, Any], State]:
    state = State()
    command = module.COMMANDS[0]
    ctx = command.make_context(command.name, list(args), obj=state)
    return dict(ctx.params), state


def _fast_reading(name: str, args: list[str]) -> tuple[dict[str, Any], State] | None:
    state = State()
    run = fast_command([name, *args], state)
    if run is None:
        return None
    return dict(run.keywords), state


READ_ALIKE = [
    [],
    ["local-01"],
    ["a", "b", "--target", "/t", "--json"],
    ["--target=/t", "a", "--root", "serve=/s", "--root=x=/y", "b"],
    ["-t", "/t", "--lock-timeout", "2.5", "--python", "/py", "a", "--lock-timeout=7"],
    ["a", "--ssh-option", "Port=22", "--ssh-option=User=x", "--ssh-program", "myssh", "-t", "h"],
    ["--json", "--json", "a"],
]


@pytest.mark.parametrize("args", READ_ALIKE)
@pytest.mark.parametrize("module,extra", [
    (cli_apply, ["--diff", "-v", "--verbose", "--with-deps", "--allow-inactive", "--commit", "-n",
                 "--dry-run"]),
    (cli_rollback, ["--force", "-n", "--dry-run"]),
    (cli_verify, []),
])
def test_fast_path_reads_a_command_line_as_click_does(module: Any, extra: list[str],
                                                      args: list[str]) -> None:
    for argv in (args, [*args, *extra]):
        fast = _fast_reading(module.COMMANDS[0].name, argv)
        assert fast is not None, argv
        clicked = _click_reading(module, argv)
        assert fast[0] == clicked[0], argv
        for attr in ("json", "ssh_options", "ssh_program"):
            assert getattr(fast[1], attr) == getattr(clicked[1], attr), (argv, attr)


STATUS_READ_ALIKE = [
    [], ["--all"], ["--exit-code", "--all", "--json"], ["--target=/t", "--root", "serve=/s"],
    ["-t", "/t", "--lock-timeout", "2.5", "--python", "/py", "--lock-timeout=7"],
    ["--ssh-option", "Port=22", "--ssh-option=User=x", "--ssh-program", "myssh", "-t", "h"],
]


@pytest.mark.parametrize("args", STATUS_READ_ALIKE)
def test_fast_path_reads_a_status_command_line_as_click_does(args: list[str]) -> None:
    fast = _fast_reading("status", args)
    assert fast is not None, args
    clicked = _click_reading(cli_status, args)
    assert fast[0] == clicked[0], args
    for attr in ("json", "ssh_options", "ssh_program"):
        assert getattr(fast[1], attr) == getattr(clicked[1], attr), (args, attr)


@pytest.mark.parametrize("module", [cli_apply, cli_rollback, cli_verify, cli_status])
def test_fast_options_name_every_click_option_of_the_command(module: Any) -> None:
    """A fast option click lacks, or one of another kind, would read differently."""
    seen = set()
    for param in module.COMMANDS[0].params:
        if param.param_type_name != "option":
            continue
        for opt in (*param.opts, *param.secondary_opts):
            name, kind, _default = module.FAST_OPTIONS[opt]  # defaults: the reading test
            seen.add(opt)
            assert name == param.name
            want = ("flag" if param.is_flag else "once" if param.callback is one_value
                    else "multiple" if param.multiple
                    else "float" if param.type.name == "float" else "value")
            assert kind == want, opt
    assert seen == set(module.FAST_OPTIONS)


@pytest.mark.parametrize("argv", [
    ["apply", "--help"], ["apply", "-h"], ["--version", "list"], ["--help"],
    ["apply", "-nv", "a"], ["apply", "--", "a"], ["apply", "--lock-timeout", "x", "a"],
    ["apply", "--target"], ["apply", "--target", "--json"], ["apply", "--no-such", "a"],
    ["apply", "--json=1", "a"], ["apply", "-t=/x", "a"], ["--debug=1", "apply", "a"],
    ["--catalog"], ["status", "a"], ["status", "--all", "x", "--json"], ["status", "-h"],
    ["verify", "-n", "a"], ["list"], ["rollback", "--with-deps", "a"],
    ["apply", "-"], ["--catalog", "c", "--bogus", "apply", "a"],
])
def test_anything_unusual_goes_to_click(argv: list[str]) -> None:
    assert fast_command(argv, State()) is None


def test_debug_in_the_environment_goes_to_click(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fast_command(["apply", "a"], State()) is not None
    monkeypatch.setenv("PATCHKIT_DEBUG", "1")
    assert fast_command(["apply", "a"], State()) is None


def test_group_options_reach_the_state() -> None:
    state = State()
    assert fast_command(["--catalog", "/c", "--config=/p.toml", "--debug", "rollback", "a"],
                        state) is not None
    assert (state.catalog_dir, state.config_path, state.debug) == ("/c", "/p.toml", True)


def _run_main(env: Env, *args: str) -> tuple[int, str, list[str]]:
    """The real ``main()`` in a fresh interpreter; which of the watched modules it loaded."""
    return run_counting_imports(env, *args, watched={*NOT_ON_FAST_PATH, *NEVER, *ONLY_WHEN_NEEDED})


def test_apply_rollback_and_status_run_without_click(env: Env) -> None:
    code, out, loaded = _run_main(env, "apply", INDEX_K, "--target", str(env.sglang), "--json")
    assert code == 0, out
    assert json.loads(out)["fixes"][0]["outcome"] == "applied"
    assert b"head_dim * 2" in (env.sglang / POOL).read_bytes()
    assert loaded == ["patchkit.engine.txn"], loaded
    code, out, loaded = _run_main(env, "status", "--target", str(env.sglang), "--json")
    assert code == 0 and loaded == [], loaded
    assert {s["name"]: s["state"] for s in json.loads(out)["status"]["fixes"]}[INDEX_K] == "applied"
    code, out, loaded = _run_main(env, "rollback", INDEX_K, "--target", str(env.sglang))
    assert code == 0 and f"rolled-back {INDEX_K}" in out and loaded == ["patchkit.engine.txn"]
    assert git(env.sglang, "status", "--porcelain") == ""


def test_fast_path_errors_leave_by_the_same_boundary(env: Env) -> None:
    """A usage error of a fast-path run: the same exit code and JSON error as through click."""
    code, out, loaded = _run_main(env, "apply", "--target", str(env.sglang), "--json")
    assert code == 2 and loaded == []
    assert json.loads(out)["error"]["type"] == "UsageError"
    code, out, loaded = _run_main(env, "apply", "-nv", "--target", str(env.sglang))
    assert code == 2 and "click" in loaded  # click read it, and refused the missing fix name


def test_records_act_as_frozen_dataclasses() -> None:
    fix = load_manifest(CATALOG / "manifests" / "index-k-bytes.toml")
    assert dataclasses.is_dataclass(fix) and isinstance(fix, Fix)
    assert [f.name for f in dataclasses.fields(Upstream)] == [
        "base_release", "releases", "project", "root", "forwarding", "reference"]
    newer = dataclasses.replace(fix, version=fix.version + 1)
    assert newer.version == fix.version + 1 and newer.patches == fix.patches and newer != fix
    assert dataclasses.replace(newer, version=fix.version) == fix
    assert load_manifest(CATALOG / "manifests" / "index-k-bytes.toml") == fix
    up = Upstream("0.5.21", ("0.5.21",))
    assert hash(up) == hash(Upstream("0.5.21", ("0.5.21",))) and up != Upstream("0.5.21", ())
    assert repr(up) == ("Upstream(base_release='0.5.21', releases=('0.5.21',), project='sglang', "
                        "root='sglang', forwarding='not-forwarded', reference='')")
    assert dataclasses.asdict(fix.upstream)["releases"] == ("0.5.20", "0.5.21")
    assert Check("grep", {"path": "a"}).params["path"] == "a"
    with pytest.raises(dataclasses.FrozenInstanceError):
        up.root = "serve"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del fix.name  # type: ignore[misc]
    check = CheckResult("grep", "n", True, "", "sglang:x")
    result = OpResult("apply", True, False, "t", (), (), (), {"op": "apply"})
    assert dataclasses.replace(result, ok=False).ok is False and result.ok is True
    assert check == CheckResult("grep", "n", True, "", "sglang:x") and check != up


def _status_result(rng: Any) -> OpResult:
    from patchkit.results import FixState

    names = ["local-01", "drift-0.5.23", "index-k-bytes", "x", "a-very-long-fix-name-for-a-column"]
    states = ["applied", "drifted", "not-applied", "partly-present", "present-unrecorded"]
    paths = ["python/sglang/srt/pool.py", "a.py", "python/sglang/srt/layers/attention/x.py",
             "odd [name].py", "smile:smile:.py", "ünï.py", "t\tab.py", "n:100:.py", "t:12:34.py"]
    status = []
    for _ in range(rng.randrange(0, 5)):
        files = tuple({"path": rng.choice(paths), "state": rng.choice(["ok", "changed", "missing"])}
                      for _ in range(rng.choice([0, 1, 2, 7])))
        status.append(FixState(rng.choice(names), rng.choice(states), rng.choice([None, 1, 12]),
                               rng.choice([None, "2026-11-29T20:13:45Z",
                                           "2026-11-29T20:00:00+00:00"]),
                               files))
    recovered = tuple({"op": "apply", "fixes": rng.sample(names, rng.randrange(1, 3)),
                       "outcome": "rolled-back"} for _ in range(rng.choice([0, 0, 1])))
    target = rng.choice(["sglang=/t", "sglang=/srv/" + "deep/" * rng.randrange(1, 16) + "tree",
                         "host:/srv/sglang", "sglang=/[x]"])
    return OpResult("status", True, False, target, (), recovered, tuple(status), {})


def test_status_written_without_rich_reads_as_rich_draws_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where stdout is no terminal, status is written without rich only when rich would draw
    the very same characters (80 columns, nothing folded, escaped or replaced)."""
    import io
    import random

    from rich.console import Console

    from patchkit.cli import render

    rng = random.Random(7)
    monkeypatch.setattr(render, "_pipe_width", lambda: 80)
    plain = 0
    for _ in range(400):
        result, verbose = _status_result(rng), rng.random() < 0.5
        want = io.StringIO()
        render.render_status(Console(file=want, width=80, highlight=False, soft_wrap=False),
                             result, verbose=verbose)
        got = io.StringIO()
        used_rich: list[bool] = []
        lazy = render.LazyConsole()
        lazy._real = Console(file=got, width=80, highlight=False, soft_wrap=False)
        monkeypatch.setattr(lazy, "real", lambda: used_rich.append(True) or lazy._real)
        monkeypatch.setattr(sys, "stdout", got)
        render.render_status(lazy, result, verbose=verbose)  # type: ignore[arg-type]
        monkeypatch.undo()
        monkeypatch.setattr(render, "_pipe_width", lambda: 80)
        assert got.getvalue() == want.getvalue(), (result, verbose)
        plain += not used_rich
    assert 40 < plain < 400  # both ways were taken (66 of 400 plainly with this seed)


def test_status_on_a_pipe_loads_no_rich(env: Env) -> None:
    import shutil
    import tempfile

    code, out, loaded = _run_main(env, "apply", INDEX_K, "--target", str(env.sglang))
    assert code == 0
    short = Path(tempfile.mkdtemp(prefix="pk", dir="/tmp"))  # a title no wider than the table
    try:
        (short / "t").symlink_to(env.sglang)
        code, out, loaded = _run_main(env, "status", "--target", str(short / "t"))
    finally:
        shutil.rmtree(short)
    assert code == 0 and "rich" not in loaded, (loaded, out)
    lines = out.splitlines()
    assert lines[0].rstrip() == f"status of sglang={short / 't'}"
    assert lines[1].split() == ["fix", "state", "version", "applied", "at", "files"]
    assert lines[2].split()[:3] == [INDEX_K, "applied", "v2"]


@pytest.mark.parametrize("columns", [None, "250", "100", "x"])
def test_plain_width_is_the_width_rich_draws_at(columns: str | None) -> None:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        environ["COLUMNS"] = columns
    code = ("from rich.console import Console\nfrom patchkit.cli import render\n"
            "print(render._pipe_width(), Console().width)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=environ, timeout=60, check=True)
    plain, rich_width = proc.stdout.split()
    assert plain == rich_width == (columns if columns and columns.isdigit() else "80")


def test_version_is_answered_as_click_answers_it(capsys: pytest.CaptureFixture[str]) -> None:
    from patchkit.cli.main import _run_click, main

    with pytest.raises(SystemExit) as fast:
        main(["--version"])
    fast_out = capsys.readouterr().out
    assert _run_click(["--version"], State()) == 0 and fast.value.code == 0
    assert fast_out == capsys.readouterr().out == "patchkit, version 0.1.0\n"
    code = ("import sys\nfrom patchkit.cli.main import main\ntry:\n    main(['--version'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('click', 'dataclasses', 'patchkit.catalog.model', 'typing')\n"
            "             if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.splitlines()[-1] == "[]"
