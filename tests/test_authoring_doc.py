"""docs/authoring.md's walkthrough, run verbatim (issue 13, item 7).

Every ```sh block of the document runs, in order, in one bash session in an empty directory,
with the installed `patchkit` first on PATH. Releases come from the session's upstream
directory (``PATCHKIT_UPSTREAM``, real SGLang 0.5.21 and 0.5.23 from the test cache), so the
walkthrough is the one a user runs, without a second download.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.catalog import Catalog
from patchkit.upstream import UpstreamRepo

DOC = Path(__file__).resolve().parent.parent / "docs" / "authoring.md"


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)


@pytest.mark.network
def test_the_authoring_walkthrough_runs_verbatim(tmp_path: Path,
                                                 catalog_upstream: UpstreamRepo) -> None:
    blocks = shell_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 7
    script = "set -euo pipefail\n" + "\n".join(
        f"echo '>>> block {i}'\n{block}" for i, block in enumerate(blocks, 1))
    bindir = Path(sys.executable).parent
    assert (bindir / "patchkit").exists()
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}",
               PATCHKIT_UPSTREAM=str(catalog_upstream.path), COLUMNS="200")
    env.pop("PATCHKIT_CATALOG", None)
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f">>> block {len(blocks)}" in proc.stdout

    fix = Catalog(tmp_path / "my-fixes").get("host-pool-docs")
    assert fix.version == 3 and fix.upstream.base_release == "0.5.23"
    assert "reads as device memory" in fix.rationale
    assert [c.kind for c in fix.verification] == ["grep"]
    prod = (tmp_path / "prod" / "python/sglang/srt/mem_cache/memory_pool_host.py").read_text()
    assert "Logical anchors own no host buffers" in prod
    out = " ".join(proc.stdout.split())
    assert "+# ---- V4 compressed KV host pools ----" in out  # the diff of versions 1 and 2
    assert "host-pool-docs v2: Lower-case the section title." in out  # the catalog's git log


@pytest.mark.network
def test_upstream_checkout_to_a_relative_directory_lands_in_the_working_directory(
        tmp_path: Path, catalog_upstream: UpstreamRepo) -> None:
    """It used to land beside the upstream repository (git cloned from there)."""
    here = tmp_path / "here"
    here.mkdir()
    env = dict(os.environ, PATCHKIT_UPSTREAM=str(catalog_upstream.path))
    proc = subprocess.run([sys.executable, "-m", "patchkit", "upstream", "checkout", "0.5.21",
                           "../tree"], cwd=here, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "tree" / "python" / "sglang").is_dir()
    assert not (catalog_upstream.path / "tree").exists()
