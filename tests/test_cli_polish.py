"""The rough edges a new user hits in the first day (issue 25, items 6-15), through the real
entry point (``python -m patchkit``): exit codes and output as a user sees them in a pipe."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.upstream import UpstreamRepo

REPO = Path(__file__).resolve().parent.parent


def pk(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None
       ) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, **(env or {})), stdin=subprocess.DEVNULL)


# -- 6: progress off a terminal ----------------------------------------------------------------


def test_plain_progress_names_each_step_still_running_on_stderr(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from patchkit.cli import render

    monkeypatch.setenv("PATCHKIT_PROGRESS_AFTER", "0")
    with render.busy("building the fork") as progress:
        progress.update("checking out SGLang 0.5.23\n(a second line)")
    with render.busy("quiet", quiet=True) as progress:
        progress.update("never said")
    assert capsys.readouterr().err.splitlines() == [
        "patchkit: building the fork", "patchkit: checking out SGLang 0.5.23 (a second line)"]
    monkeypatch.setenv("PATCHKIT_PROGRESS_AFTER", "off")
    with render.busy("building the fork") as progress:
        progress.update("a step")
    assert capsys.readouterr().err == ""


@pytest.mark.network
def test_upstream_fetch_in_a_pipe_says_what_it_does(upstream_repo: UpstreamRepo) -> None:
    run = pk("upstream", "fetch", "0.5.21", env={"PATCHKIT_UPSTREAM": str(upstream_repo.path),
                                                  "PATCHKIT_PROGRESS_AFTER": "0"})
    assert run.returncode == 0, run.stderr
    assert "patchkit: 0.5.21: sglang 0.5.21 already in the upstream repository" in run.stderr
    assert run.stdout.startswith("v0.5.21 ")
