"""What the command line prints around an operation, and how that leaves its exit status.

A reader that went away (``patchkit apply FIX | head -0``) or a closed stdout must not turn a
successful operation into a failure, nor a failure into another code: the exit status reports
the operation (fix names before the options, or after ``--``). The CLI wiring of
``apply --commit``, rollback of a committed fix, ``--json`` on a usage error, and output
written to a pipe (plain, never cut) are here too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.catalog import Catalog
from patchkit.errors import EXIT_CONFLICT, EXIT_OK, EXIT_USAGE
from tests.test_git_fixes import catalog, tree  # noqa: F401
from tests.test_cli import INDEX_K, POOL, Env, Run, env, git, one_file_patch, pk, tgt, write_patch  # noqa: F401

#: The same command line written two ways: (command, fix names, options).
PATHS = {
    "names first": lambda command, fixes, options: [command, *fixes, *options],
    "after --": lambda command, fixes, options: [command, *options, "--", *fixes],
}


def without_stdout(env: Env, args: list[str], how: str) -> subprocess.CompletedProcess[str]:
    """``python -m patchkit`` with a stdout whose reader is gone (``pipe``) or closed."""
    argv = [sys.executable, "-m", "patchkit", "--catalog", str(env.catalog), *args]
    if how == "pipe":
        read, write = os.pipe()
        os.close(read)  # as `| head -0`: the reader left before anything was written
        try:
            return subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True,
                                  cwd=env.tmp, timeout=120)
        finally:
            os.close(write)
    return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          cwd=env.tmp, timeout=120, preexec_fn=lambda: os.close(1))


def _target_args(env: Env) -> list[str]:
    return ["--target", str(env.sglang)]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("how", ["pipe", "closed"])
def test_a_gone_stdout_leaves_the_exit_status_to_the_operation(env: Env, path: str, how: str) -> None:
    line = PATHS[path]
    applied = without_stdout(env, line("apply", [INDEX_K], _target_args(env)), how)
    assert applied.returncode == EXIT_OK, applied.stderr
    assert b"index_k = head_dim * 2" in (env.sglang / POOL).read_bytes()
    assert "Traceback" not in applied.stderr and "internal error" not in applied.stderr

    status = without_stdout(env, line("status", [], ["--exit-code", *_target_args(env)]), how)
    assert status.returncode == EXIT_OK, status.stderr

    rolled = without_stdout(env, line("rollback", [INDEX_K], ["--json", *_target_args(env)]), how)
    assert rolled.returncode == EXIT_OK, rolled.stderr
    assert git(env.sglang, "status", "--porcelain") == ""


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_failure_keeps_its_exit_code_when_stdout_is_gone(env: Env, path: str) -> None:
    write_patch(env, INDEX_K, one_file_patch(POOL, old="    no such line\n"))
    failed = without_stdout(env, PATHS[path]("apply", [INDEX_K], ["--json", *_target_args(env)]), "pipe")
    assert failed.returncode == EXIT_CONFLICT, failed.stderr
    assert "does not apply" in failed.stderr or "conflict" in failed.stderr.lower()


def test_a_gone_stdout_on_a_catalog_command(env: Env) -> None:
    listed = without_stdout(env, ["list", "--all"], "pipe")
    assert listed.returncode == EXIT_OK, listed.stderr
    assert listed.stderr == ""


# -- apply --commit and the rollback of a committed fix ------------------------------------


def test_commit_ids_are_in_the_human_output_of_apply_commit_and_its_rollback(
        tree: Path, catalog: Catalog) -> None:
    def patchkit(command: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog.root),
                               command, "--target", str(tree), *args], capture_output=True,
                              text=True, timeout=120)

    applied = patchkit("apply", "feature", "--commit")
    assert applied.returncode == EXIT_OK, applied.stderr
    made = git(tree, "rev-parse", "HEAD").strip()
    assert f"  commit {made} (root sglang)\n" in applied.stdout

    undone = patchkit("rollback", "--", "feature")
    assert undone.returncode == EXIT_OK, undone.stderr
    revert = git(tree, "rev-parse", "HEAD").strip()
    assert revert != made
    assert f"  reverts commit {made}\n" in undone.stdout
    assert f"  commit {revert} (root sglang)\n" in undone.stdout


# -- --json on a usage error ---------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["apply", "--json", "--bogus", INDEX_K], "No such option '--bogus'"),
    (["apply", INDEX_K, "--json", "--lock-timeout", "soon"], "'soon' is not a valid float"),
    (["status", "--json", "extra"], "unexpected extra argument (extra)"),
    (["rollback", "--json", INDEX_K, "--target"], "'--target' requires an argument"),
    (["list", "--json", "--bogus"], "No such option '--bogus'"),
    (["upstream", "checkout", "--json"], "Missing argument 'VERSION'"),
])
def test_json_on_a_usage_error_prints_the_json_error_object(env: Env, args: list[str], words: str) -> None:
    run = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(env.catalog), *args],
                         capture_output=True, text=True, cwd=env.tmp, timeout=120)
    assert run.returncode == EXIT_USAGE, run.stderr
    data = json.loads(run.stdout)
    assert data["ok"] is False and data["error"]["type"] == "UsageError"
    assert words in data["error"]["message"]
    assert words in run.stderr  # people still get the message where they look


def test_a_usage_error_without_json_prints_no_json(env: Env) -> None:
    run = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(env.catalog), "apply",
                          "--bogus", "--target", str(env.sglang), "--", "--json"],
                         capture_output=True, text=True, cwd=env.tmp, timeout=120)
    assert run.returncode == EXIT_USAGE and run.stdout == ""
    assert "No such option '--bogus'" in run.stderr
    # one line, as every other error (docs/cli.md): `error: MESSAGE`, and where help is
    assert run.stderr.splitlines() == [
        "error: No such option '--bogus'. Did you mean '--verbose'? (see `patchkit apply --help`)"]


def test_the_flag_table_of_docs_cli_is_what_the_commands_take() -> None:
    import click

    from patchkit.cli.main import cli

    text = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    section = text.split("## `--json` and `--dry-run`, command by command", 1)[1].split("\n## ", 1)[0]
    documented = {m[0]: (m[1] == "yes", m[2].startswith("yes"))
                  for m in re.findall(r"^\| `([a-z ]+)` \| (yes|no)[^|]* \| (yes|no)[^|]* \|$",
                                      section, re.M)}
    ctx = click.Context(cli)
    actual: dict[str, tuple[bool, bool]] = {}

    def walk(command: click.Command, name: str) -> None:
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                walk(command.get_command(ctx, sub), f"{name} {sub}".strip())
            return
        opts = {o for p in command.params if isinstance(p, click.Option) for o in p.opts}
        actual[name] = ("--json" in opts, "--dry-run" in opts)

    walk(cli, "")
    assert documented == actual


# -- piped output: plain, one line per fix, never cut --------------------------------------

LONG_FIX = "revert-hicache-index-k-sync-and-its-hicache-dbg-tracing"
LONG_PATH = "python/sglang/srt/" + "a_rather_deep_directory/" * 5 + "memory_pool_host_with_a_long_name.py"


def piped(env: Env, *args: str, columns: int = 40, **environ: str) -> subprocess.CompletedProcess[str]:
    """``python -m patchkit ARGS`` with stdout a pipe, on a 40-column "terminal"."""
    return subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(env.catalog), *args],
                          capture_output=True, text=True, cwd=env.tmp, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if k != "FORCE_COLOR"},
                               "COLUMNS": str(columns), **environ})


def test_piped_status_keeps_a_long_fix_name_and_drifted_path_whole(env: Env) -> None:
    (env.sglang / LONG_PATH).parent.mkdir(parents=True)
    (env.sglang / LONG_PATH).write_text("x = 1\n")
    env.commit("a deep file")
    (env.catalog / "patches" / LONG_FIX).mkdir()
    (env.catalog / "patches" / LONG_FIX / "0001-x.patch").write_text(
        f"--- a/{LONG_PATH}\n+++ b/{LONG_PATH}\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    (env.catalog / "manifests" / f"{LONG_FIX}.toml").write_text(
        f'format = 1\nname = "{LONG_FIX}"\nversion = 1\ntitle = "A fix with a long name"\n'
        'status = "active"\nrationale = "Its name is long."\n[upstream]\nbase_release = "0.5.21"\n'
        '[[patches]]\nfile = "0001-x.patch"\nroot = "sglang"\n')
    assert piped(env, "apply", LONG_FIX, *_target_args(env)).returncode == EXIT_OK
    (env.sglang / LONG_PATH).write_text("x = 3\n")  # drifted

    status = piped(env, "status", *_target_args(env))
    assert status.returncode == EXIT_OK, status.stderr
    rows = [line for line in status.stdout.splitlines() if LONG_FIX in line]  # grep -c
    assert len(rows) == 1, status.stdout
    fix, state, version, applied_at, files = rows[0].split("\t")
    assert (fix, state, version, files) == (LONG_FIX, "drifted", "v1", f"{LONG_PATH} (drifted)")
    assert applied_at.endswith("Z")
    listed = piped(env, "list").stdout.splitlines()
    assert [row.split("\t")[:3] for row in listed if LONG_FIX in row] == [[LONG_FIX, "v1", "active"]]

    drawn = piped(env, "status", *_target_args(env), FORCE_COLOR="1")  # rich only when asked
    assert "\x1b[" in drawn.stdout and "\t" not in drawn.stdout


def test_piped_status_with_nothing_applied_prints_no_row(env: Env) -> None:
    status = piped(env, "status", *_target_args(env))
    assert status.returncode == EXIT_OK and status.stdout == ""
    assert f"no fix applied or present on sglang={env.sglang}" in status.stderr
    everything = piped(env, "status", "--all", *_target_args(env)).stdout.splitlines()
    assert [row.split("\t")[:2] for row in everything] == [
        [INDEX_K, "not-applied"], ["old-index-k", "not-applied"]]


def test_piped_diff_keeps_a_300_character_line_whole(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_authoring import small_checkout

    monkeypatch.delenv("PATCHKIT_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)
    src = small_checkout(tmp_path)

    def patchkit(*args: str) -> subprocess.CompletedProcess[str]:
        run = subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "COLUMNS": "40"})
        assert run.returncode == EXIT_OK, run.stderr
        return run

    patchkit("init", "fixes")
    monkeypatch.chdir(tmp_path / "fixes")
    a = src / "python/sglang/a.py"
    a.write_text(a.read_text().replace("two = 2", "two = 22"))
    patchkit("new", "myfix", "--from", str(src))
    long_line = "three = 3  # " + "x" * 287
    assert len(long_line) == 300
    a.write_text(a.read_text().replace("three = 3", long_line))
    patchkit("refresh", "myfix", "--from", str(src))
    diff = patchkit("diff", "myfix", "--versions", "1", "2").stdout
    assert any(line.endswith(long_line) for line in diff.splitlines()), diff


def test_every_json_object_names_its_command_as_op() -> None:
    """`show --json` and `log --json` had no `op`, where every other command's object has one."""
    from tests.test_remote import SAMPLES, cli

    for args, op in ((["show", "index-k-bytes"], "show"), (["log"], "log"),
                     (["upstream", "list"], None)):
        code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), *args, "--json"])
        assert code == 0, out + err
        data = json.loads(out)
        if op is None:  # a list: no object to carry it
            assert isinstance(data, list)
        else:
            assert data["op"] == op and data["ok"] is True, sorted(data)
