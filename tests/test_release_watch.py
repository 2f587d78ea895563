"""`patchkit upstream fetch --latest`: the release watch's first step (issue 24, docs/rebase.md).

The newest release is read from the real package registry; the test checks it against the
registry's own list as ``pip download`` reports it (another of pip's mechanisms), then fetches it
through the CLI into a fresh release store (the wheel linked from the tests' cache).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from patchkit.errors import EXIT_USAGE
from patchkit.upstream import latest_release, version_key

pytestmark = pytest.mark.network


def registry_versions() -> list[str]:
    """Every final release pip download sees, from its refusal of a version that does not exist."""
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "sglang==0.0.0.0",
                           "-d", os.devnull, "--disable-pip-version-check"],
                          capture_output=True, text=True)
    listed = re.search(r"from versions: ([^)]*)\)", proc.stdout + proc.stderr)
    assert listed, proc.stdout + proc.stderr
    return [v.strip() for v in listed.group(1).split(",")
            if re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", v.strip())]


def test_latest_is_the_newest_final_release_on_the_registry() -> None:
    newest = max(registry_versions(), key=version_key)
    assert latest_release() == newest


def test_fetch_needs_a_release_or_latest(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "patchkit", "upstream", "fetch"],
                          capture_output=True, text=True,
                          env=dict(os.environ, PATCHKIT_UPSTREAM=str(tmp_path / "store")))
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "--latest" in proc.stderr
    assert not (tmp_path / "store").exists()


def test_fetch_latest_commits_the_newest_release(tmp_path: Path, sglang_wheels: Path) -> None:
    newest = latest_release()
    store = tmp_path / "store"
    (store / "wheels").mkdir(parents=True)
    cached = sorted(sglang_wheels.glob(f"sglang-{newest}-*.whl"))
    for wheel in cached:  # no second download of a wheel the tests already have
        os.link(wheel, store / "wheels" / wheel.name)
    proc = subprocess.run([sys.executable, "-m", "patchkit", "upstream", "fetch", "--latest",
                           "--json"], capture_output=True, text=True,
                          env=dict(os.environ, PATCHKIT_UPSTREAM=str(store)))
    assert proc.returncode == 0, proc.stderr
    [fetched] = json.loads(proc.stdout)
    assert fetched["version"] == newest
    listed = subprocess.run([sys.executable, "-m", "patchkit", "upstream", "list", "--json"],
                            capture_output=True, text=True,
                            env=dict(os.environ, PATCHKIT_UPSTREAM=str(store)))
    assert newest in json.loads(listed.stdout)
