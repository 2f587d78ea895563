"""Scale cases of the hostile-input issue (26): ``patchkit import`` of a 20 MB mbox, and the
apply of one very large patch; wall time and peak RSS of each (``resource``'s ``ru_maxrss`` of
the child), with the working tree's patchkit (``python -m patchkit``).

    python bench/scale.py [--mbox-mb 20] [--patch-mb 20 --patch-mb 184] [--workdir DIR]

``--mbox-mb 0`` leaves the import out; each ``--patch-mb`` is one apply case, its peak given
as a multiple of the patch's size. The figures go to docs/reliability.md ("Scale") and
docs/performance.md, by hand: this prints them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def mail(i: int, total: int, lines: int) -> str:
    body = "".join(f"+value_{i}_{n} = {n}  # a generated line of the scale case\n"
                   for n in range(lines))
    return (f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: Scale Test <scale@example.org>\nDate: Tue, 10 Nov 2026 12:00:00 +0000\n"
            f"Subject: [PATCH {i}/{total}] scale: module {i}\n\nA generated module.\n---\n"
            f"diff --git a/python/sglang/scale_{i}.py b/python/sglang/scale_{i}.py\n"
            f"new file mode 100644\n--- /dev/null\n+++ b/python/sglang/scale_{i}.py\n"
            f"@@ -0,0 +1,{lines} @@\n{body}-- \npatchkit\n\n")


def big_patch(path: Path, tree: Path, megabytes: int, files: int = 2000) -> None:
    """A patch rewriting every line of ``files`` files of ``megabytes`` MB in all (the files
    created in ``tree``), as a drift series of a release is: many files, each changed whole."""
    line = "x = 1  # a generated line of the large-patch scale case, long enough\n"
    count = max(1, megabytes * 1_000_000 // (2 * len(line)) // files)
    new = line.replace("x = 1", "x = 2")
    (tree / "python" / "sglang").mkdir(parents=True, exist_ok=True)
    (tree / "python" / "sglang" / "version.py").write_text('__version__ = "0.5.23"\n')
    with path.open("w") as fh:
        for n in range(files):
            rel = f"python/sglang/big/m{n // 100}/f{n}.py"
            target = tree / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(line * count)
            fh.write(f"diff --git a/{rel} b/{rel}\n--- a/{rel}\n+++ b/{rel}\n"
                     f"@@ -1,{count} +1,{count} @@\n")
            fh.write(("-" + line) * count)
            fh.write(("+" + new) * count)


def measured(argv: list[str], cwd: Path) -> tuple[float, float, int, str]:
    """Run in a fresh helper process, so ru_maxrss of RUSAGE_CHILDREN is this child's alone."""
    code = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(json.dumps([time.perf_counter() - t, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, p.returncode, "
            "(p.stdout + p.stderr)[-400:]]))")
    import json
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    seconds, peak, rc, tail = json.loads(done.stdout)
    return seconds, peak, rc, tail


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mbox-mb", type=int, default=20)
    parser.add_argument("--patch-mb", type=int, action="append",
                        help="the size of one large-patch apply case (repeatable; default 50)")
    parser.add_argument("--workdir")
    parser.add_argument("--mails", type=int, default=1)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="patchkit-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    py = [sys.executable, "-m", "patchkit"]
    catalog = work / "catalog"
    subprocess.run([*py, "init", str(catalog)], cwd=work, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    per_mail, mails = 60, args.mails
    if args.mbox_mb:
        lines = args.mbox_mb * 1_000_000 // mails // per_mail
        mbox = work / "scale.mbox"
        with mbox.open("w") as fh:
            for i in range(1, mails + 1):
                fh.write(mail(i, mails, lines))
        size = mbox.stat().st_size / 1e6
        secs, peak, rc, tail = measured([*py, "--catalog", str(catalog), "import", "--mbox",
                                         str(mbox), "--release", "0.5.23", "--name", "scale"], work)
        print(f"import of a {size:.1f} MB mbox ({mails} mails): {secs:.1f} s, peak {peak:.0f} MB, "
              f"exit {rc}" + ("" if rc == 0 else f"\n{tail}"))
    for megabytes in args.patch_mb or [50]:
        name = f"big-{megabytes}"
        tree = work / f"tree-{megabytes}"
        patch = work / "big.patch"
        big_patch(patch, tree, megabytes)
        manifests = catalog / "manifests"
        (catalog / "patches" / name).mkdir(parents=True)
        os.replace(patch, catalog / "patches" / name / "big.patch")
        (manifests / f"{name}.toml").write_text(
            f'format = 1\nname = "{name}"\nversion = 1\ntitle = "big: every line"\n'
            'status = "active"\nrationale = "The scale case."\n\n[upstream]\n'
            'base_release = "0.5.23"\nreleases = []\n\n[[patches]]\nfile = "big.patch"\n\n'
            '[[changelog]]\nversion = 1\ndate = "2026-11-10"\nsummary = "scale"\n')
        mb = (catalog / "patches" / name / "big.patch").stat().st_size / 1e6
        secs, peak, rc, tail = measured([*py, "--catalog", str(catalog), "apply", name,
                                         "--target", str(tree)], work)
        print(f"apply of one {mb:.0f} MB patch: {secs:.1f} s, peak {peak:.0f} MB "
              f"({peak / mb:.1f}x the patch), exit {rc}" + ("" if rc == 0 else f"\n{tail}"))


if __name__ == "__main__":
    main()
