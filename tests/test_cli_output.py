"""What the command line prints around an operation, and how that leaves its exit status.

A reader that went away (``patchkit apply FIX | head -0``) or a closed stdout must not turn a
successful operation into a failure, nor a failure into another code: the exit status reports
the operation. Both ways a command line is read are covered: the fast path (plain options)
and click (``--`` before the fix names sends a command line there). The CLI wiring of
``apply --commit``, rollback of a committed fix, and ``--json`` on a usage error are here too.
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

#: The same command line read by the fast path and by click: (command, fix names, options).
PATHS = {
    "fast": lambda command, fixes, options: [command, *fixes, *options],
    "click": lambda command, fixes, options: [command, *options, "--", *fixes],
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


def test_a_gone_stdout_on_a_click_only_command(env: Env) -> None:
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

    applied = patchkit("apply", "feature", "--commit")  # the fast path
    assert applied.returncode == EXIT_OK, applied.stderr
    made = git(tree, "rev-parse", "HEAD").strip()
    assert f"  commit {made} (root sglang)\n" in applied.stdout

    undone = patchkit("rollback", "--", "feature")  # click
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
