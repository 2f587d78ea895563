"""Writes this sample with the engine of the checkout it runs in (it was run once, on the
release before the typed records, and its output committed): two targets, each a tiny tree
with its ``.patchkit/`` as that engine wrote it.

- ``applied/``: fixes ``alpha`` (modifies mod.py, deletes old.py) and ``beta`` (modifies
  mod.py after alpha, creates ``extra/new.py`` in a new directory) applied in two transactions.
- ``interrupted/``: ``alpha`` applied, then an apply of ``beta`` killed (SIGKILL) after its
  first rename: a journal, its transaction's scratch and a lock-holder record left behind.

``original/`` is the tree before any apply. Run: python make_sample.py OUTDIR
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from patchkit.engine import run  # noqa: E402
from tests.engine.helpers import file_record, fix, request  # noqa: E402

MOD = "python/sglang/srt/mod.py"
OLD = "python/sglang/srt/old.py"
NEW = "python/sglang/srt/extra/new.py"
MOD_TEXT = "".join("def f%d(x):\n    return x + %d\n\n" % (i, i) for i in range(12))
ALPHA_TEXT = MOD_TEXT.replace("return x + 2\n", "return x + 2  # alpha\n")
BETA_TEXT = ALPHA_TEXT.replace("return x + 9\n", "return x + 9  # beta\n")


def tree(root: Path) -> None:
    pkg = root / "python" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text("version: str\n__version__ = version = '0.5.21'\n")
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "mod.py").write_text(MOD_TEXT)
    (pkg / "srt" / "old.py").write_text("OLD = 1\n")


FIXES = [
    fix("alpha", [file_record(MOD, MOD_TEXT, ALPHA_TEXT), file_record(OLD, "OLD = 1\n", None)],
        title="alpha: a tiny modify and a delete"),
    fix("beta", [file_record(MOD, ALPHA_TEXT, BETA_TEXT, patch="0001-b.patch"),
                 file_record(NEW, None, "NEW = 2\n", patch="0001-b.patch", mode="100644")],
        requires=["alpha"], title="beta: on top of alpha, and a new file"),
]


def apply(root: Path, fixes: list, fault: str = "") -> None:
    req = request("apply", {"sglang": root}, fixes, git=False, python="/usr/bin/python3")
    if not fault:
        res = run(req)
        assert res["ok"], res["error"]
        return
    driver = "import sys, json; from patchkit.engine import run; run(json.loads(sys.stdin.read()))"
    env = dict(os.environ, PATCHKIT_FAULT=fault, PYTHONPATH=str(HERE.parents[2]))
    proc = subprocess.run([sys.executable, "-c", driver], input=json.dumps(req), env=env, text=True)
    assert proc.returncode == -9, proc.returncode


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    tree(out / "original")
    tree(out / "applied")
    apply(out / "applied", FIXES[:1])
    apply(out / "applied", FIXES[1:])
    tree(out / "interrupted")
    apply(out / "interrupted", FIXES[:1])
    apply(out / "interrupted", FIXES[1:], fault="rename:2")
    (out / "fixes.json").write_text(json.dumps(FIXES, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
