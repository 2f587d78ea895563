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
