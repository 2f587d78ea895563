"""Apply, check, status and start-up of patchkit against git apply, GNU patch, quilt and git am.

Workload (bench/perf_workload.py): the real upstream drift from SGLang 0.5.22 to 0.5.23 as one
catalog fix with one patch per changed file, and 20 small local fixes (one patch each) against
0.5.22. Every tool runs on a fresh copy of the same 0.5.22 checkout (index refreshed, as a
checkout someone works in), interleaved, N times; wall time and peak RSS (GNU time's
``%M``: the largest process of the command) per run.

    python bench/perf.py                                    # N=5, prints the tables
    python bench/perf.py --write-doc docs/performance.md    # and updates its section there
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helper next to this script

from doc_section import write_section  # noqa: E402
from perf_workload import DRIFT, LOCAL, NEW, OLD, Workload, build  # noqa: E402

from patchkit.upstream import UpstreamRepo  # noqa: E402

SECTION = "## Apply, check, status and start-up"
TIME = "/usr/bin/time"  # GNU time: peak RSS of the measured command
REPO = Path(__file__).resolve().parent.parent
# Set by main() to the benchmark's own virtualenv (``install``): patchkit installed from this
# checkout the way users install it, a regular install rather than the editable one of a
# development venv, whose import finder costs every process ~20 ms at start-up.
PATCHKIT: list[str] = []
PYTHON = sys.executable
GIT_ENV = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@patchkit.invalid",
           "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@patchkit.invalid",
           "GIT_CONFIG_NOSYSTEM": "1"}


@dataclass(frozen=True)
class Sample:
    seconds: float
    rss_kb: int


def measure(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
            stdin: str | None = None) -> Sample:
    """Wall time and peak RSS of one command; a failure stops the benchmark."""
    full_env = dict(os.environ, **GIT_ENV, **(env or {}))
    full_env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed patchkit has its bytecode
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
    # /usr/bin/time -f %M, not this process's wait4: a child forked from this (large) Python
    # process would report this process's memory as its own peak.
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        try:
            start = time.perf_counter()
            proc = subprocess.run([TIME, "-f", "%M", "-o", rss.name, *argv], cwd=cwd,
                                  env=full_env, stdin=fin, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
            seconds = time.perf_counter() - start
        finally:
            if stdin:
                fin.close()  # type: ignore[union-attr]
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:6])} ... failed ({proc.returncode}) in {cwd}:\n"
                             f"{proc.stderr.decode(errors='replace')[-3000:]}")
        rss_kb = int(rss.read().split()[-1])
    return Sample(seconds, rss_kb)


class Trees:
    """Fresh copies of the base checkout, made untimed before each run."""

    def __init__(self, work: Workload, scratch: Path) -> None:
        self.work, self.scratch, self.n = work, scratch, 0

    def fresh(self) -> Path:
        self.n += 1
        dest = self.scratch / f"tree-{self.n}"
        subprocess.run(["cp", "-a", str(self.work.base), str(dest)], check=True)
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=dest, capture_output=True)
        # Flushed before the timed run, as a deployed tree has long been on disk: else the
        # first tool that makes its writes durable (patchkit's syncfs) would also pay for
        # writing out this copy, and the tools that flush nothing would not.
        os.sync()
        return dest

    def drop(self, tree: Path) -> None:
        shutil.rmtree(tree, ignore_errors=True)


def cases(work: Workload, xdg: Path) -> dict[str, list[tuple[str, object]]]:
    """Comparison name -> [(tool label, run(tree) -> Sample)], in table order."""
    cat = str(work.catalog)
    pk_env = {"XDG_CACHE_HOME": str(xdg)}

    def patchkit(names: list[str], *extra: str, cold: bool = False):
        def run(tree: Path) -> Sample:
            if cold:
                shutil.rmtree(xdg, ignore_errors=True)
            return measure([*PATCHKIT, "--catalog", cat, "apply", *names, "--target", str(tree),
                            *extra], tree, pk_env)
        return run

    def files(kind: str) -> list[str]:
        return (work.series[kind] / "files.txt").read_text().splitlines()

    def git_apply(kind: str, *extra: str):
        return lambda tree: measure(["git", "apply", *extra, *files(kind)], tree)

    def patch_each(kind: str):
        script = 'while read -r p; do patch -p1 -s -N -i "$p" || exit 1; done'
        return lambda tree: measure(["bash", "-c", script], tree,
                                    stdin=str(work.series[kind] / "files.txt"))

    def quilt(kind: str):
        env = {"QUILT_PATCHES": "/", "QUILT_SERIES": str(work.series[kind] / "series"),
               "QUILTRC": "/dev/null"}
        return lambda tree: measure(["quilt", "push", "-a", "-q"], tree, env)

    def git_am(kind: str):
        mails = sorted(str(p) for p in (work.series[kind] / "mails").iterdir())
        return lambda tree: measure(["git", "am", "-q", "--keep-cr", *mails], tree)

    return {
        "drift": [
            ("patchkit apply, all checks, first run (plan cache empty)", patchkit([DRIFT], cold=True)),
            ("patchkit apply, all checks, repeat run (plan cache warm)", patchkit([DRIFT])),
            ("`git apply` (one call, all patches)", git_apply("drift")),
            ("GNU `patch -p1` per file", patch_each("drift")),
            ("`git am --keep-cr` (one mail per patch)", git_am("drift")),
            ("`quilt push -a`", quilt("drift")),
        ],
        "drift-check": [
            ("patchkit apply --dry-run, all checks, repeat run", patchkit([DRIFT], "--dry-run")),
            ("`git apply --check`", git_apply("drift", "--check")),
        ],
        "local": [
            ("patchkit apply of the 20 fixes, first run", patchkit(LOCAL, cold=True)),
            ("patchkit apply of the 20 fixes, repeat run", patchkit(LOCAL)),
            ("`git apply` (one call)", git_apply("local")),
            ("GNU `patch -p1` per file", patch_each("local")),
            ("`git am --keep-cr` (one mail per patch)", git_am("local")),
            ("`quilt push -a`", quilt("local")),
        ],
    }


def prepare_status_tree(work: Workload, trees: Trees, xdg: Path) -> Path:
    """0.5.22 with the drift and the 20 local fixes applied by patchkit (untimed).

    ``xdg`` is the status runs' own cache directory, as the user's is after those applies:
    the cold-run cases empty theirs before each run."""
    tree = trees.fresh()
    for names in ([DRIFT], LOCAL):
        measure([*PATCHKIT, "--catalog", str(work.catalog), "apply", *names, "--target",
                 str(tree)], tree, {"XDG_CACHE_HOME": str(xdg)})
    return tree


def run_all(work: Workload, scratch: Path, repeat: int, say) -> dict[str, dict[str, list[Sample]]]:
    xdg = scratch / "xdg"
    trees = Trees(work, scratch)
    table = cases(work, xdg)
    out: dict[str, dict[str, list[Sample]]] = {k: {label: [] for label, _ in v} for k, v in table.items()}
    status_xdg = scratch / "xdg-status"
    status_tree = prepare_status_tree(work, trees, status_xdg)
    n_files = int(subprocess.run(["git", "ls-files"], cwd=status_tree, capture_output=True,
                                 text=True, check=True).stdout.count("\n"))
    extra = {
        "status": [
            (f"`patchkit status` ({DRIFT} and the 20 fixes applied, every fix of the catalog)",
             lambda t: measure([*PATCHKIT, "--catalog", str(work.catalog), "status", "--target",
                                str(t)], t, {"XDG_CACHE_HOME": str(status_xdg)})),
            ("`git status --porcelain`", lambda t: measure(["git", "status", "--porcelain"], t)),
            ("`patchkit status`, user cache emptied first (the catalog's series parsed again)",
             lambda t: cold_status(t)),
        ],
        "startup": [
            ("`patchkit --version`", lambda t: measure([*PATCHKIT, "--version"], t)),
            ('`python -c "import click, rich"` (same venv)',
             lambda t: measure([PYTHON, "-c", "import click, rich"], t)),
        ],
    }
    def cold_status(tree: Path) -> Sample:
        cold = scratch / "xdg-cold"
        shutil.rmtree(cold, ignore_errors=True)
        return measure([*PATCHKIT, "--catalog", str(work.catalog), "status", "--target",
                        str(tree)], tree, {"XDG_CACHE_HOME": str(cold)})

    for k, v in extra.items():
        out[k] = {label: [] for label, _ in v}
    for i in range(repeat):
        for kind, tools in table.items():
            for label, run in tools:
                tree = trees.fresh()
                sample = run(tree)  # type: ignore[operator]
                out[kind][label].append(sample)
                say(f"#{i + 1} {kind}: {label}: {sample.seconds:.3f} s, {sample.rss_kb / 1024:.0f} MB")
                trees.drop(tree)
        for kind, tools in extra.items():
            for label, run in tools:
                sample = run(status_tree)  # type: ignore[operator]
                out[kind][label].append(sample)
                say(f"#{i + 1} {kind}: {label}: {sample.seconds:.3f} s")
    out["_files"] = {str(n_files): []}
    return out


def _fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def report(results: dict[str, dict[str, list[Sample]]], work: Workload, repeat: int) -> str:
    n_files = next(iter(results["_files"]))
    titles = {
        "drift": f"Apply the drift series ({work.drift_files} patches, "
                 f"{work.drift_bytes / 1e6:.1f} MB: SGLang {OLD} -> {NEW}, one patch per file)",
        "drift-check": "Check the drift series without writing",
        "local": "Apply the 20-fix local series (one small patch per fix)",
        "status": f"Status of a full checkout ({n_files} files)",
        "startup": "CLI start-up",
    }
    lines = [SECTION, "",
             f"Measured by `python bench/perf.py` on {datetime.date.today().isoformat()}: every "
             f"tool on a fresh copy of the same SGLang {OLD} checkout (index refreshed), N = "
             f"{repeat} each, interleaved, in one run. Wall time is the whole command (patchkit: the "
             "`patchkit` command of a virtualenv where it is installed from this checkout with "
             "`pip install`, as users install it, Python start-up included). Peak RSS is GNU time's `%M`: the largest "
             "process of the command (for the per-file loops that is one `patch` or `bash`). patchkit runs with all its checks: release, touched files present and "
             "clean against git, writable, the manifests' checks, all-or-nothing transaction with "
             "backups and fsync, verification, state record.", "",
             f"Machine: {os.cpu_count()} cores, {platform.system()}, Python "
             f"{platform.python_version()}, {_version(['git', '--version'])}, "
             f"{_version(['patch', '--version'])}, {_version(['quilt', '--version'], 'quilt ')}; "
             f"1-minute load average {os.getloadavg()[0]:.1f} when the run ended.", ""]
    for kind, title in titles.items():
        rows = results[kind]
        lines += [f"### {title}", "", "| tool | median | min | peak RSS | vs. the first row |",
                  "|---|---|---|---|---|"]
        first = None
        for label, samples in rows.items():
            med = statistics.median(s.seconds for s in samples)
            first = first or med
            rss = max(s.rss_kb for s in samples) / 1024
            lines.append(f"| {label} | {_fmt(med)} | {_fmt(min(s.seconds for s in samples))} | "
                         f"{rss:.0f} MB | {med / first:.2f}x |")
        lines.append("")
    return "\n".join(lines + targets(results))


def _median(results: dict[str, dict[str, list[Sample]]], kind: str, row: int) -> float:
    return statistics.median(s.seconds for s in list(results[kind].values())[row])


def targets(results: dict[str, dict[str, list[Sample]]]) -> list[str]:
    """Issue 7's targets against this run's medians, judged here so the verdict cannot drift
    from the figures above it."""
    git_apply = _median(results, "drift", 2)
    rows = [
        ("drift apply, first run, within 3x of `git apply`", _median(results, "drift", 0), git_apply, 3.0),
        ("drift apply, repeat run, within 1.5x of `git apply`", _median(results, "drift", 1), git_apply, 1.5),
        ("`status` within 2.5x of `git status --porcelain`", _median(results, "status", 0),
         _median(results, "status", 1), 2.5),
        ("`--version` within 1.5x of `import click, rich`", _median(results, "startup", 0),
         _median(results, "startup", 1), 1.5),
    ]
    out = ["### Targets (issue 7), judged on this run's medians", "",
           "| target | patchkit | anchor | ratio | |", "|---|---|---|---|---|"]
    for label, ours, anchor, limit in rows:
        ratio = ours / anchor
        verdict = "met" if ratio <= limit else f"missed by {ratio / limit:.1f}x"
        out.append(f"| {label} | {_fmt(ours)} | {_fmt(anchor)} | {ratio:.2f}x | {verdict} |")
    for row, which in ((0, "first run"), (1, "repeat run")):
        ours = _median(results, "local", row)
        verdict = "met" if ours < 0.150 else f"missed by {ours / 0.150:.1f}x"
        out.append(f"| 20-fix apply, {which}, CLI start included, under 150 ms | {_fmt(ours)} | "
                   f"150 ms | | {verdict} |")
    return out + [""]


def _version(argv: list[str], prefix: str = "") -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True).stdout.strip().splitlines()
    except OSError:
        return f"{argv[0]} missing"
    return prefix + out[0] if out else argv[0]


def install(venv: Path, say) -> None:
    """A virtualenv with patchkit installed from this checkout as users install it (``pip
    install``, not editable), its bytecode compiled as pip does; sets PATCHKIT and PYTHON.

    The dependencies are installed once (kept with ``--workdir``); patchkit itself is
    reinstalled on every run so the figures are of the checkout's current source."""
    global PATCHKIT, PYTHON
    python = venv / "bin" / "python"
    if not python.exists():
        say(f"creating the benchmark's virtualenv in {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(REPO)], check=True, env=env)  # the dependencies, once
    subprocess.run([*pip, "--no-deps", "--force-reinstall", str(REPO)], check=True, env=env)
    site = subprocess.run([str(python), "-c", "import patchkit, os; print(os.path.dirname(patchkit.__file__))"],
                          check=True, capture_output=True, text=True, env=env, cwd=venv).stdout.strip()
    if Path(site).resolve().is_relative_to(REPO):
        raise SystemExit(f"the benchmark's virtualenv imports patchkit from the checkout ({site}), "
                         "not from its install; remove it and run again")
    subprocess.run([str(python), "-m", "compileall", "-q", site], check=True, env=env)
    PATCHKIT, PYTHON = [str(venv / "bin" / "patchkit")], str(python)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per tool (default 5)")
    parser.add_argument("--workdir", type=Path,
                        help="keep the workload there and reuse it (default: a temp dir, removed)")
    parser.add_argument("--upstream", type=Path, help="patchkit upstream repository (default: its cache)")
    parser.add_argument("--write-doc", type=Path, help="replace this benchmark's section in that file")
    parser.add_argument("--notes", type=Path, help="markdown appended to the section (the analysis)")
    args = parser.parse_args()
    for tool in ("git", "patch", "quilt", TIME):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (apt-get install {tool})")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="patchkit-perf-")).resolve()
    say = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    try:
        work = build(workdir / "workload", UpstreamRepo(args.upstream), say=say)
        install(workdir / "venv", say)
        scratch = workdir / "runs"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        results = run_all(work, scratch, args.repeat, say)
        section = report(results, work, args.repeat)
        if args.notes:
            section = section.rstrip("\n") + "\n\n" + args.notes.read_text().strip() + "\n"
        print(section)
        if args.write_doc:
            write_section(args.write_doc, section)
            say(f"wrote {args.write_doc}")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
