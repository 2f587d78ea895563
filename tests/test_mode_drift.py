"""A file's permission bits are part of what a fix left: a ``chmod`` since is drift, as a change
of its bytes is (status, verify, rollback refusing without --force). Before, ``chmod +x`` of a
patched serve script passed ``status --exit-code`` and ``verify``, and a plain rollback put
it back to 0644 without a word (a new-user trial). A file the fix created and someone deleted
is said to be missing, and a forced rollback of it lists no file it created."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from tests.fixtures.user_catalog import app_patch, app_tree, pk, tree_digest, user_catalog

NEW_FILE = "--- /dev/null\n+++ b/added.py\n@@ -0,0 +1 @@\n+x = 1\n"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_chmod_of_a_written_file_is_drift(tmp_path: Path) -> None:
    tree = app_tree(tmp_path / "tree")
    os.chmod(tree / "app.py", 0o644)
    catalog = user_catalog(tmp_path / "catalog", {"edit": (app_patch(), "")})
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "edit", *where).returncode == 0
    assert pk(*cat, "status", "--exit-code", *where).returncode == 0

    os.chmod(tree / "app.py", 0o755)
    before = tree_digest(tree)
    status = pk(*cat, "status", "--exit-code", "--json", *where)
    assert status.returncode == 1, status.stdout + status.stderr
    (fix,) = json.loads(status.stdout)["status"]["fixes"]
    assert fix["state"] == "drifted"
    seen = fix["files"][0]
    assert (seen["path"], seen["state"], seen["mode"], seen["recorded_mode"]) == (
        "app.py", "drifted", "0755", "0644")
    assert "app.py (drifted: mode 0755, recorded 0644)" in pk(*cat, "status", *where).stdout
    verified = pk(*cat, "verify", "edit", *where)
    said = " ".join(verified.stderr.split())
    assert verified.returncode == 1 and "app.py (drifted: mode 0755, recorded 0644)" in said, said
    assert ("only the mode changed, the bytes are as patchkit wrote them: put it back (chmod 0644 "
            f"{tree / 'app.py'})") in said, said
    again = " ".join(pk(*cat, "apply", "edit", *where).stdout.split())
    assert "app.py (drifted: mode 0755, recorded 0644)" in again and "chmod 0644" in again, again
    refused = pk(*cat, "rollback", "edit", *where)
    assert refused.returncode != 0 and "mode now 0755, recorded 0644" in refused.stderr, refused.stderr
    assert f"put the modes back first (chmod 0644 {tree / 'app.py'})" in " ".join(refused.stderr.split())
    # bytes edited and mode changed: both said
    (tree / "app.py").write_text((tree / "app.py").read_text() + "# edited\n")
    both = pk(*cat, "rollback", "edit", *where).stderr
    assert "sha256 now" in both and "; mode now 0755, recorded 0644" in both, both
    assert "restore the applied bytes first" in both, both
    before = tree_digest(tree)
    assert tree_digest(tree) == before and _mode(tree / "app.py") == 0o755

    forced = pk(*cat, "rollback", "edit", "--force", *where)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "value = 1" in (tree / "app.py").read_text() and _mode(tree / "app.py") == 0o644


def test_a_created_file_deleted_since_is_missing_and_a_forced_rollback_creates_nothing(
        tmp_path: Path) -> None:
    tree = app_tree(tmp_path / "tree")
    catalog = user_catalog(tmp_path / "catalog", {"add": (NEW_FILE, "")})
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "add", *where).returncode == 0
    (tree / "added.py").unlink()
    refused = pk(*cat, "rollback", "add", *where)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "missing now (deleted since)" in refused.stderr and "None" not in refused.stderr, \
        refused.stderr
    forced = pk(*cat, "rollback", "add", "--force", "--json", *where)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    files = json.loads(forced.stdout)["fixes"][0]["files"]
    assert all(f["op"] != "create" for f in files), files
    assert not (tree / "added.py").exists()
    assert "A " not in pk(*cat, "status", "--all", *where).stdout
