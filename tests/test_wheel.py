"""A regular install carries the shipped catalog (issue 13, item 2).

The wheel is built from this checkout, installed into a fresh venv (its dependencies from
the package index, cached across sessions), and `patchkit list` and `patchkit demo` run from
a directory that holds no catalog, so the catalog can only come from the installed package.
The demo finds SGLang 0.5.23 in the session's upstream directory (``PATCHKIT_UPSTREAM``, as
tests/test_demo.py does) instead of downloading it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit.catalog import Catalog
from patchkit.demo import SEED_FIXES
from patchkit.upstream import UpstreamRepo

REPO = Path(__file__).resolve().parent.parent


def sh(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=900)


@pytest.mark.network
def test_a_wheel_install_lists_and_demos_the_shipped_catalog_from_anywhere(
        tmp_path: Path, persistent_cache: Path, catalog_upstream: UpstreamRepo) -> None:
    wheels = tmp_path / "wheels"
    pip_env = dict(os.environ, PIP_CACHE_DIR=str(persistent_cache / "pip"),
                   PIP_DISABLE_PIP_VERSION_CHECK="1")
    built = sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
               str(REPO), cwd=tmp_path, env=pip_env)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("patchkit_sglang-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every module of the source tree is in the wheel (the package list is written out).
    for path in (REPO / "patchkit").rglob("*.py"):
        assert path.relative_to(REPO).as_posix() in names
    for path in [*(REPO / "manifests").glob("*.toml"), *(REPO / "patches").rglob("*")]:
        if path.is_file() and "__pycache__" not in path.parts:
            assert f"patchkit/_catalog/{path.relative_to(REPO).as_posix()}" in names
    for path in (REPO / "patchkit" / "fleet" / "collection").rglob("*"):  # the Ansible collection
        if path.is_file() and "__pycache__" not in path.parts:
            assert path.relative_to(REPO).as_posix() in names
    assert not any(n.endswith(".pyc") for n in names)

    venv = tmp_path / "venv"
    # a venv without pip of its own (installing one cost more than the rest of the test):
    # this venv's pip installs into it (--python)
    assert sh(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=tmp_path).returncode == 0
    installed = sh(sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                   "install", "-q", "--find-links", str(wheels), str(wheel), cwd=tmp_path,
                   env=pip_env)
    assert installed.returncode == 0, installed.stderr

    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_CATALOG", "PYTHONPATH")}
    where = sh(str(venv / "bin" / "python"), "-c", "import patchkit; print(patchkit.__file__)",
               cwd=nowhere, env=env)
    assert str(venv) in where.stdout, where.stdout + where.stderr

    patchkit = str(venv / "bin" / "patchkit")
    collections = Path(sh(patchkit, "plan", "--collections-path", cwd=nowhere, env=env).stdout.strip())
    assert str(venv) in str(collections)
    assert (collections / "ansible_collections/patchkit/fleet/meta/runtime.yml").is_file()
    listed = sh(patchkit, "list", "--all", "--json", cwd=nowhere, env=env)
    assert listed.returncode == 0, listed.stderr
    assert [f["name"] for f in json.loads(listed.stdout)] == Catalog(REPO).names()

    # The installed catalog is never written to: `new` points at `patchkit init`.
    src = tmp_path / "src"
    src.mkdir()
    sh("git", "init", "-q", cwd=src)
    refused = sh(patchkit, "new", "myfix", "--from", str(src), cwd=nowhere, env=env)
    assert refused.returncode == 2 and "patchkit init" in refused.stderr, refused.stderr

    demo = sh(patchkit, "demo", "--workdir", str(tmp_path / "demo"), cwd=nowhere,
              env=dict(env, PATCHKIT_UPSTREAM=str(catalog_upstream.path)))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    out = " ".join(demo.stdout.split())
    for name in SEED_FIXES:
        assert f"applied {name} v{Catalog(REPO).get(name).version}" in out
