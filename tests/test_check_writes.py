"""A verification check that changes a file the apply wrote undoes the apply, naming the file:
checks only read the target (docs/manifest.md). Before, the apply succeeded with the hashes of
the files as written recorded, so the very next ``status`` said drifted and ``rollback``
refused (found by a new-user trial)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

MANIFEST = """\
format = 1
name = "{name}"
version = 1
title = "{name}"
status = "active"
rationale = "a fix whose verification command {what}"

[upstream]
base_release = "any"
releases = []
root = "tree"

[[patches]]
file = "0001.patch"
root = "tree"

[[verification]]
kind = "command"
root = "tree"
argv = ["{{python}}", "-c", "import sys; {code}", "{{root:tree}}/app.py"]
name = "{what}"
"""

PATCH = """\
--- a/app.py
+++ b/app.py
@@ -1,2 +1,2 @@
 print("app")
-value = 1
+value = 2
"""


def pk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)


def _tree_and_catalog(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "app.py").write_text('print("app")\nvalue = 1\n')
    catalog = tmp_path / "catalog"
    assert pk("init", str(catalog), "--no-git").returncode == 0
    for name, what, code in (
            ("writes", "appends to the file it checks",
             "open(sys.argv[1], 'a').write('# checked\\\\n')"),
            ("reads", "only reads the file it checks", "open(sys.argv[1]).read()")):
        (catalog / "manifests" / f"{name}.toml").write_text(
            MANIFEST.format(name=name, what=what, code=code))
        (catalog / "patches" / name).mkdir(parents=True)
        (catalog / "patches" / name / "0001.patch").write_text(PATCH)
    return tree, catalog


def _digest(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.rglob("*")) if p.is_file()}


def test_a_check_that_changes_a_written_file_undoes_the_apply(tmp_path: Path) -> None:
    tree, catalog = _tree_and_catalog(tmp_path)
    before = _digest(tree)
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}", "--python", sys.executable]
    done = pk(*cat, "apply", "writes", *where, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["error"]["type"] == "VerificationFailed"
    assert "changed tree:app.py after patchkit wrote it" in data["error"]["message"]
    assert "a check must only read the target" in data["error"]["message"]
    assert {k: v for k, v in _digest(tree).items() if not k.startswith(".patchkit/")} == before
    status = json.loads(pk(*cat, "status", *where, "--json").stdout)
    assert [f["name"] for f in status["status"]["fixes"] if f["state"] != "not-applied"] == []


def test_a_check_that_only_reads_is_applied_and_stays_applied(tmp_path: Path) -> None:
    tree, catalog = _tree_and_catalog(tmp_path)
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}", "--python", sys.executable]
    done = pk(*cat, "apply", "reads", *where)
    assert done.returncode == 0, done.stderr
    assert pk(*cat, "status", *where, "--exit-code").returncode == 0
