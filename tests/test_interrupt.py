"""Ctrl-C says what it left, as SIGTERM does: "interrupted by SIGINT; nothing it wrote is left
half-done ..." on stderr and in ``--json`` (the target named), exit 130, the target as it was
and no check left running. Before, a Ctrl-C during an apply's verification printed a blank line
and "aborted", and its JSON had no target (found by a new-user trial)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MANIFEST = """\
format = 1
name = "slow"
version = 1
title = "slow"
status = "active"
rationale = "a fix whose verification takes a while"

[upstream]
base_release = "any"
releases = []
root = "tree"

[[patches]]
file = "0001-slow.patch"
root = "tree"

[[verification]]
kind = "command"
root = "tree"
argv = ["{python}", "-c", "import os, pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(60)", "MARK"]
name = "takes a while"
"""

PATCH = """\
--- a/app.py
+++ b/app.py
@@ -1,2 +1,2 @@
 print("app")
-value = 1
+value = 2
"""


def _digest(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.rglob("*")) if p.is_file() and ".git" not in p.parts}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ctrl_c_during_a_verification_says_what_it_left(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "app.py").write_text('print("app")\nvalue = 1\n')
    catalog = tmp_path / "catalog"
    run = [sys.executable, "-m", "patchkit"]
    assert subprocess.run([*run, "init", str(catalog), "--no-git"], capture_output=True).returncode == 0
    mark = tmp_path / "check.pid"
    (catalog / "manifests" / "slow.toml").write_text(MANIFEST.replace("MARK", str(mark)))
    (catalog / "patches" / "slow").mkdir(parents=True)
    (catalog / "patches" / "slow" / "0001-slow.patch").write_text(PATCH)
    before = _digest(tree)

    proc = subprocess.Popen([*run, "--catalog", str(catalog), "apply", "slow", "--root",
                             f"tree={tree}", "--python", sys.executable, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # SIGINT not ignored, as at a terminal
    deadline = time.monotonic() + 60
    while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.05)
    assert mark.exists(), proc.communicate()
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 130, out + err
    said = "interrupted by SIGINT; nothing it wrote is left half-done"
    assert said in err and "patchkit status" in err, err
    data = json.loads(out)
    assert data["ok"] is False and data["error"]["type"] == "Interrupted"
    assert said in data["error"]["message"]
    assert data["target"] and str(tree) in data["target"]
    assert _digest(tree) == before  # the written file put back
    assert not (tree / ".patchkit" / "journal.json").exists()
    deadline = time.monotonic() + 10
    while _alive(int(mark.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(int(mark.read_text()))  # the check's process ended with the run
