"""Every benchmark in one run, for one or two patchkit versions: the one entry point of bench/.

    python bench/all.py                                         # the working tree only, prints
    python bench/all.py --before 759230d --write-doc docs/performance.md
    python bench/all.py --before 759230d --quick --write-doc scratch.md      # a quick check

Installs each version (``--before REV``, a git revision of this repository, and the working
tree) into its own fresh virtualenv with a regular ``pip install``, then runs the benchmarks one
after another (never side by side: they would measure each other), every version interleaved
with the others inside each: ``seed.py`` (the seed's three fixes, locally and over SSH, and the
seed's own procedure), ``rebase_bench.py`` (rebase vs git rebase, cherry-pick, GNU patch,
quilt), ``perf.py`` (the drift series and the 20-fix series vs git apply, GNU patch, git am,
quilt; status vs git status) and ``fleet.py`` (the seed's fixes on 16 loopback hosts: patchkit
on Ansible vs one host, a sequential ``ssh://`` loop and an ``ansible.posix.patch`` playbook;
the working tree only, installed with its ``fleet`` extra). Writes a "before / after" section
and each benchmark's section.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modules next to this script

import fleet  # noqa: E402
import perf  # noqa: E402
import ratios  # noqa: E402
import rebase_bench  # noqa: E402
import seed  # noqa: E402
from common import REPO, TIME, Version, fmt, install, machine, say, write_section  # noqa: E402

BENCHES = {"seed": seed, "rebase": rebase_bench, "perf": perf, "ratios": ratios, "fleet": fleet}
SECTION = "## Before and after"


def summary_section(versions: list[Version], rows, command: str, repeat: int, notes: str) -> str:
    """One table: every workload's median and min per version, peak RSS, the issue's targets."""
    labels = [v.label for v in versions]
    head = " | ".join(f"{label}: median (min)" for label in labels) + (" | after / before" if len(labels) == 2 else "")
    lines = [SECTION, "",
             f"Measured by `{command}` on {datetime.date.today().isoformat()}, N = {repeat}, "
             "every version interleaved with the others in one run. "
             + "; ".join(f"**{v.label}**: patchkit from {v.source}" for v in versions)
             + "; each installed into its own fresh virtualenv with a regular (not editable) "
             "`pip install`, bytecode compiled, and run through its `patchkit` command with a "
             "user cache of its own. The sections below give every row, with the other tools.", "",
             machine(), "",
             f"| workload | {head} | peak RSS ({' / '.join(labels)}) | notes |",
             "|---|" + "---|" * (len(labels) + (len(labels) == 2)) + "---|---|"]
    for name, samples, limit, conns, *notes_of_row in rows:
        # A row may hold only some versions (the fleet: the working tree only) and its own notes.
        have = [label for label in labels if samples.get(label)]
        medians = {label: statistics.median(s.seconds for s in samples[label]) for label in have}
        cells = [f"{fmt(medians[label])} ({fmt(min(s.seconds for s in samples[label]))})"
                 if label in have else "-" for label in labels]
        if len(labels) == 2:
            cells.append(f"{medians[labels[1]] / medians[labels[0]]:.2f}x" if len(have) == 2 else "-")
        target = []
        if limit is not None:
            target.append(f"target: median under {fmt(limit)}: " + ", ".join(
                f"{label} {'met' if medians[label] < limit else 'missed'}" for label in have))
        if conns:
            target.append("target: exactly one SSH connection (client / server): " + ", ".join(
                f"{label} {conns[label]}, {'met' if conns[label] == '1 / 1' else 'missed'}"
                for label in have))
        target += notes_of_row
        rss = " / ".join(f"{max(s.rss_kb for s in samples[label]) / 1024:.0f} MB"
                         if any(s.rss_kb for s in samples.get(label, ())) else "-" for label in labels)
        lines.append(f"| {name} | {' | '.join(cells)} | {rss} | {'; '.join(target)} |")
    if notes:
        lines += ["", notes.strip()]
    return "\n".join(lines + [""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="also measure this git revision (the 'before')")
    parser.add_argument("--repeat", type=int, help="runs per row (default 5; 1 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="a check that the benchmarks run: one repetition, no GNU patch, git am "
                             "or quilt on the drift")
    parser.add_argument("--only", action="append", choices=list(BENCHES), help="run only these (repeatable)")
    parser.add_argument("--workdir", type=Path, help="keep the virtualenvs and workloads there "
                        "(default: a temporary directory, removed)")
    parser.add_argument("--write-doc", type=Path, help="replace the sections in that file")
    parser.add_argument("--notes", type=Path, help="markdown appended to the before / after section")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 5)
    for tool in ("git", "patch", "quilt", "ssh", TIME):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install "
                             f"{'time' if tool == TIME else 'openssh-client' if tool == 'ssh' else tool})")
    if args.before:
        subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{args.before}^{{commit}}"],
                       cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="patchkit-bench-")).resolve()
    try:
        # The fleet drives Ansible: the working tree gets its fleet extra (ansible-core); a
        # --before revision is installed as it is and measured only by the other benchmarks.
        extras = "fleet" if "fleet" in (args.only or list(BENCHES)) else ""
        versions = ([install("before", args.before, workdir)] if args.before else []) \
            + [install("after", None, workdir, extras)]
        sections, rows = [], []
        for name in args.only or list(BENCHES):
            say(f"== {name}")
            section, summary = BENCHES[name].run(versions, repeat, args.quick, workdir / name)
            sections.append(section)
            rows += summary
        command = "python bench/all.py" + (f" --before {args.before}" if args.before else "") \
            + (" --quick" if args.quick else "") + (f" --repeat {args.repeat}" if args.repeat else "")
        head = summary_section(versions, rows, command, repeat,
                               args.notes.read_text() if args.notes else "")
        print("\n".join([head, *sections]))
        if args.write_doc:
            for section in sections:
                write_section(args.write_doc, section)
            write_section(args.write_doc, head, first=True)
            say(f"wrote {args.write_doc}")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
