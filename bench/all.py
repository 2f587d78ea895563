"""Every benchmark in one command, each writing its section of docs/performance.md.

    python bench/all.py                                    # prints the three reports
    python bench/all.py --write-doc docs/performance.md    # and replaces their sections there

Runs, one after another (never side by side: they would measure each other):
``remote_vs_seed.py`` (remote apply vs the seed's scp/ssh procedure), ``rebase_bench.py``
(rebase vs git rebase, cherry-pick, GNU patch, quilt) and ``perf.py`` (apply, check, status
and start-up vs git apply, GNU patch, git am, quilt). A failing benchmark stops the run with
its exit code; the sections already written stay.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ("remote_vs_seed.py", "rebase_bench.py", "perf.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-doc", type=Path, help="replace each benchmark's section in that file")
    args = parser.parse_args()
    for name in BENCHES:
        argv = [sys.executable, str(HERE / name)]
        if args.write_doc:
            argv += ["--write-doc", str(args.write_doc)]
        print(f"== {name}", file=sys.stderr, flush=True)
        code = subprocess.run(argv).returncode
        if code != 0:
            raise SystemExit(f"{name} failed (exit {code})")


if __name__ == "__main__":
    main()
