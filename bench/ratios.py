"""patchkit as a ratio to the tool users would otherwise use (issue 29), each pair measured
side by side in one run: every repetition runs every row, subject and anchor one after the
other, so a busy machine slows both.

- the seed's deploy, locally: ``patchkit apply`` of the three fixes on a fresh copy of the demo
  fork, against the seed's own hand procedure run on another fresh copy (``ast.parse`` and
  ``bash -n`` of the staged files, two copies, ``git checkout DEAD^ -- file``, ``grep -c``, the
  pyc purge, ``ast.parse`` with the target's Python, ``grep -c hierarchical``) plus the fix's
  sizing check script, which patchkit also runs; for scale, the floor of that row: one Python
  importing every module the apply imports, then the check script alone;
- ``patchkit status`` of a checkout carrying the 2,152-patch drift series and the 20 local
  fixes, against ``git status --porcelain`` on the same tree;
- ``patchkit status`` of a checkout carrying the 20 local fixes, its catalog those 20 fixes,
  against a bare ``patchkit --version``;
- ``patchkit apply`` of the drift series on a fresh copy, against one ``git apply`` of the same
  patches on another, with peak RSS.

Run alone against an installed patchkit: ``python bench/ratios.py --venv VENV --workdir DIR``
(the perf workload is built in DIR, or reused from there), or through ``bench/all.py --only ratios``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from common import NEUTRAL, Sample, Version, fmt, measure, say, with_cache
from perf_workload import DRIFT, LOCAL, build

SECTION = "## Ratios to the tools users would otherwise use"
SEED_FIXES = ("dsv4-bf16-sizing", "revert-hicache-index-k-sync", "prefill-hicache-off")
POOL = "python/sglang/srt/model_executor/pool_configurator.py"
HOST_POOL = "python/sglang/srt/mem_cache/memory_pool_host.py"

# The seed's procedure with its ssh and scp taken out: what it does on the host, run here.
HAND = """\
set +e
{python} -c "import ast; ast.parse(open('{stage}/pool_configurator.py').read()); print('pool_configurator py ok')"
bash -n {stage}/serve_dsv4_prefill.sh && echo "serve ok"
cp {stage}/pool_configurator.py {sglang}/{pool}
cp {stage}/serve_dsv4_prefill.sh {serve}/serve_dsv4_prefill.sh
cd {sglang}
git checkout {dead}^ -- {host_pool} && echo "restored"
grep -c "HICACHE_DBG\\|_bf16_index_k" {host_pool}
find python/sglang/srt/mem_cache/__pycache__ python/sglang/srt/model_executor/__pycache__ -name "*.pyc" -delete 2>/dev/null
{python} -c "import ast; ast.parse(open('{pool}').read()); print('deployed pool_configurator ok')"
echo "prefill hicache: $(grep -c hierarchical {serve}/serve_dsv4_prefill.sh) (0=off)"
{python} {script} {sglang}
"""


def _fresh(src: Path, dest: Path) -> Path:
    """A copy of ``src`` flushed to disk untimed (as perf.py's trees)."""
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    for git_dir in dest.rglob(".git"):
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=git_dir.parent, capture_output=True)
    os.sync()
    return dest


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


#: The rows by short name, in the order the table lists them (``--row``).
ROWS = ("seed", "seed-floor", "drift-status", "status-floor", "catalog-floor", "local-status", "drift-apply")

# The least a status that reads the files can do: start Python, read the record, hash every
# file it names. Measured beside `git status` to show what item 2's 3x leaves for the rest.
FLOOR = """\
import hashlib, json, os
state = json.load(open(".patchkit/state.json"))
for fix in state["fixes"]:
    for f in fix["files"]:
        try:
            with open(os.path.join(fix["roots"][f["root"]], f["path"]), "rb") as fh:
                hashlib.sha256(fh.read()).hexdigest()
        except FileNotFoundError:
            pass
"""


def run(versions: list[Version], repeat: int, quick: bool, workdir: Path,
        rows: tuple[str, ...] = ROWS):
    import seed  # its demo fork and staged edits

    v = versions[-1]
    repeat = max(repeat, 5)  # the N >= 5, whatever --quick says
    workdir.mkdir(parents=True, exist_ok=True)
    work = build(workdir / "workload", v, say=say)
    runs = workdir / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir()
    # the seed's demo fork and the files it had edited by hand
    shutil.rmtree(workdir / "seed", ignore_errors=True)
    fork = seed.make_fork(v, workdir / "seed")
    stage = workdir / "seed" / "seed-edits"
    seed.stage_seed_edits(fork, stage)
    python = v.python
    script = seed.REPO / "patches" / "dsv4-bf16-sizing" / "checks" / "bytes_per_token.py"

    # status trees, made untimed: the drift and the 20 fixes; the 20 fixes alone
    cat = str(work.catalog)
    drift_tree = runs / "status-drift"
    local_tree = _fresh(work.base, runs / "status-local")
    local_cat = runs / "catalog-20"
    shutil.copytree(work.catalog, local_cat)
    (local_cat / "manifests" / f"{DRIFT}.toml").unlink()
    shutil.rmtree(local_cat / "patches" / DRIFT)
    env = with_cache(v, "cache-ratios").env
    setups = [(local_tree, str(local_cat), LOCAL)]
    if {"drift-status", "status-floor", "catalog-floor"} & set(rows):
        _fresh(work.base, drift_tree)
        setups += [(drift_tree, cat, [DRIFT]), (drift_tree, cat, LOCAL)]
    for tree, catalog, names in setups:
        measure([v.patchkit, "--catalog", catalog, "apply", *names, "--target", str(tree)], tree, env)
    drift_files = (work.series["drift"] / "files.txt").read_text().splitlines()

    def seed_pk() -> Sample:
        copy = seed.copy_fork(fork, runs / "seed-pk")
        os.sync()
        sample = measure([v.patchkit, "apply", *SEED_FIXES, "--target", str(copy.sglang),
                          "--root", f"serve={copy.serve}", "--json"], NEUTRAL, env)
        shutil.rmtree(copy.workdir)
        return sample

    def seed_hand() -> Sample:
        copy = seed.copy_fork(fork, runs / "seed-hand")
        os.sync()
        text = HAND.format(python=python, stage=stage, sglang=copy.sglang, serve=copy.serve,
                           pool=POOL, host_pool=HOST_POOL, dead=fork.dead[:9], script=script)
        sample = measure(["bash", "-c", text], NEUTRAL)
        if "deployed pool_configurator ok" not in sample.stdout:
            raise SystemExit(f"the hand procedure failed:\n{sample.stdout}")
        shutil.rmtree(copy.workdir)
        return sample

    # The floor of the seed's row: what `patchkit apply` cannot do without, whatever it does
    # in between. One Python importing every module the apply imports (listed from a run of it
    # with -X importtime, untimed), then the check script alone on a tree the hand procedure
    # deployed (untimed): the CLI start-up and the script an apply runs, with nothing else.
    if "seed-floor" in rows:
        deployed = seed.copy_fork(fork, runs / "seed-floor")
        subprocess.run(["bash", "-c", HAND.format(
            python=python, stage=stage, sglang=deployed.sglang, serve=deployed.serve, pool=POOL,
            host_pool=HOST_POOL, dead=fork.dead[:9], script=script)], check=True, capture_output=True)
        probe = seed.copy_fork(fork, runs / "seed-probe")
        traced = subprocess.run([python, "-X", "importtime", "-m", "patchkit", "apply", *SEED_FIXES,
                                 "--target", str(probe.sglang), "--root", f"serve={probe.serve}",
                                 "--json"], cwd=NEUTRAL, env={**os.environ, **env}, capture_output=True,
                                check=True)
        shutil.rmtree(probe.workdir)
        modules = [line.rsplit("|", 1)[1].strip() for line in traced.stderr.decode().splitlines()
                   if line.startswith("import time:") and "imported package" not in line]
        importer = runs / "seed-floor-imports.py"
        importer.write_text("for name in %r:\n    try:\n        __import__(name)\n"
                            "    except ImportError:\n        pass\n" % modules)
        floor_cmd = f"{python} {importer} && {python} {script} {deployed.sglang}"

    def seed_floor() -> Sample:
        return measure(["bash", "-c", floor_cmd], NEUTRAL, env)

    def drift(tool: str) -> Sample:
        tree = _fresh(work.base, runs / f"drift-{tool}")
        argv = ([v.patchkit, "--catalog", cat, "apply", DRIFT, "--target", str(tree)]
                if tool == "patchkit" else ["git", "apply", *drift_files])
        sample = measure(argv, tree, env if tool == "patchkit" else None)
        shutil.rmtree(tree)
        return sample

    pairs = [(row, *pair) for row, pair in zip(ROWS, [
        ("seed deploy, 3 fixes, local fork: `patchkit apply` / the seed's hand procedure "
         "(same check script)", seed_pk, seed_hand, 1.0),
        ("for scale, no goal: one Python importing every module `patchkit apply` imports, then "
         "the check script alone (what the apply cannot do without) / the seed's hand procedure",
         seed_floor, seed_hand, None),
        (f"`patchkit status`, {DRIFT} and the 20 fixes applied / `git status --porcelain`",
         lambda: measure([v.patchkit, "--catalog", cat, "status", "--target", str(drift_tree)],
                         drift_tree, env),
         lambda: measure(["git", "status", "--porcelain"], drift_tree), 3.0),
        ("for scale, no goal: Python reading the record of the same checkout and hashing every "
         "file it names (no patchkit) / `git status --porcelain`",
         lambda: measure([str(v.python), "-c", FLOOR], drift_tree),
         lambda: measure(["git", "status", "--porcelain"], drift_tree), None),
        ("for scale, no goal: `patchkit list` of the same catalog (the CLI's start and the "
         "reading of every manifest, which any status does first) / `git status --porcelain`",
         lambda: measure([v.patchkit, "--catalog", cat, "list"], drift_tree, env),
         lambda: measure(["git", "status", "--porcelain"], drift_tree), None),
        ("`patchkit status`, the 20 fixes applied (catalog of the 20) / `patchkit --version`",
         lambda: measure([v.patchkit, "--catalog", str(local_cat), "status", "--target",
                          str(local_tree)], local_tree, env),
         lambda: measure([v.patchkit, "--version"], NEUTRAL, env), 1.5),
        (f"drift apply ({work.drift_files} patches) / one `git apply` of them",
         lambda: drift("patchkit"), lambda: drift("git"), 2.0),
    ]) if row in rows]
    pairs = [p[1:] for p in pairs]
    out: dict[str, tuple[list[Sample], list[Sample]]] = {p[0]: ([], []) for p in pairs}
    loads = []
    for i in range(repeat):
        for label, subject, anchor, _goal in pairs:
            # alternate which goes first, so neither always runs on a warmer cache
            first, second = (subject, anchor) if i % 2 == 0 else (anchor, subject)
            a = first()
            b = second()
            s, t = (a, b) if i % 2 == 0 else (b, a)
            out[label][0].append(s)
            out[label][1].append(t)
            say(f"#{i + 1} {label}: {fmt(s.seconds)} / {fmt(t.seconds)}")
        loads.append(_load())
    return report(out, pairs, repeat, loads), []


def report(out, pairs, repeat: int, loads: list[str]) -> str:
    lines = [SECTION, "",
             f"Each row a pair, subject / anchor, measured one right after the other in every "
             f"repetition (which of the two goes first alternates), N = {repeat}; the ratio is of "
             "the medians, and of the minimums. Wall time is the whole command (patchkit: its "
             "CLI process, Python start-up included); peak RSS is GNU time's `%M`. Trees that "
             "are written are fresh copies flushed to disk untimed. 1-minute load average after "
             "each repetition: " + ", ".join(loads) + ".", "",
             "| pair (subject / anchor) | subject median (min) | anchor median (min) | "
             "ratio of medians (of mins) | goal | peak RSS subject / anchor |",
             "|---|---|---|---|---|---|"]
    for label, _s, _a, goal in pairs:
        subj, anch = out[label]
        ms, ma = statistics.median(x.seconds for x in subj), statistics.median(x.seconds for x in anch)
        ns, na = min(x.seconds for x in subj), min(x.seconds for x in anch)
        r = ms / ma
        verdict = "none" if goal is None else f"<= {goal:g}x: {'met' if r <= goal else 'missed'}"
        lines.append(f"| {label} | {fmt(ms)} ({fmt(ns)}) | {fmt(ma)} ({fmt(na)}) | "
                     f"{r:.2f}x ({ns / na:.2f}x) | {verdict} | "
                     f"{max(x.rss_kb for x in subj) / 1024:.0f} MB / "
                     f"{max(x.rss_kb for x in anch) / 1024:.0f} MB |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, required=True, help="a virtualenv with patchkit installed")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--row", action="append", choices=ROWS,
                        help="measure only this row (repeatable; default: every row)")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    link = workdir / "venv-given" / "venv"  # its user caches go beside it, in the work directory
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(args.venv.resolve())
    v = with_cache(Version("after", "the given virtualenv", link, {}), "cache")
    section, _ = run([v], args.repeat, False, workdir, tuple(args.row or ROWS))
    print(section)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
