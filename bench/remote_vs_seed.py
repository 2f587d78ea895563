"""A remote `patchkit apply` of the seed's three fixes against the seed's own procedure.

The seed deployed its fixes to the DeepSeek-V4 server with one hand-written bash command:
check two locally edited files (``ast.parse``, ``bash -n``), ``scp`` each to the host, then
one ``ssh`` that restores memory_pool_host.py with ``git checkout <dead commit>^ --``, greps
for leftover debug markers, deletes stale ``.pyc`` files, re-parses the deployed file and
greps the serve script. This script runs that procedure and ``patchkit apply
dsv4-bf16-sizing revert-hicache-index-k-sync prefill-hicache-off --target ssh://...`` on
loopback, each on fresh copies of the demo fork (:func:`patchkit.demo.build_fork`), and
reports wall time, ssh connections (counted by a wrapper ssh program *and* in sshd's log),
what each approach checked, and whether the resulting trees agree.

Run it from a virtualenv where patchkit is installed, in a patchkit source checkout:

    python bench/remote_vs_seed.py                       # N=5, prints the table
    python bench/remote_vs_seed.py --write-doc docs/performance.md

It needs OpenSSH (client and server) and git; the SGLang release comes from patchkit's
upstream cache (downloaded from PyPI on first use).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
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
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helper next to this script

from doc_section import write_section  # noqa: E402
from sshd import LoopbackSshd, loopback_sshd  # noqa: E402

from patchkit.catalog import Catalog  # noqa: E402
from patchkit.demo import (  # noqa: E402
    HOST_POOL, LATER_EDIT, LATER_SUBJECT, SEED_FIXES, SERVE_SCRIPT, DemoFork, build_fork, demo_release)
from patchkit.upstream import UpstreamRepo  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
POOL = "python/sglang/srt/model_executor/pool_configurator.py"
HOST_POOL = "python/sglang/srt/mem_cache/memory_pool_host.py"
SECTION = "## Remote apply vs the seed's procedure"

# The seed's message, with its host, paths, dead commit and interpreter as placeholders.
SEED_COMMAND = """\
{python} -c "import ast; ast.parse(open('{stage}/pool_configurator.py').read()); print('pool_configurator py ok')"
bash -n {stage}/serve_dsv4_prefill.sh && echo "serve ok"
scp -S {ssh} -P {port} -q {stage}/pool_configurator.py {dest}:{sglang}/python/sglang/srt/model_executor/pool_configurator.py
scp -S {ssh} -P {port} -q {stage}/serve_dsv4_prefill.sh {dest}:{serve}/serve_dsv4_prefill.sh
{ssh} -p {port} {dest} 'set +e
cd {sglang}
echo "=== restore clean memory_pool_host.py (revert dead {dead} + remove debug instrumentation) ==="
git checkout {dead}^ -- python/sglang/srt/mem_cache/memory_pool_host.py && echo "restored"
grep -c "HICACHE_DBG\\|_bf16_index_k" python/sglang/srt/mem_cache/memory_pool_host.py
echo "(0 = clean)"
find python/sglang/srt/mem_cache/__pycache__ python/sglang/srt/model_executor/__pycache__ -name "*.pyc" -delete 2>/dev/null
{python} -c "import ast; ast.parse(open(\\"python/sglang/srt/model_executor/pool_configurator.py\\").read()); print(\\"deployed pool_configurator ok\\")"
echo "prefill hicache: $(grep -c hierarchical {serve}/serve_dsv4_prefill.sh) (0=off)"'
"""
# What the seed's output must say for each of its checks to have passed.
SEED_CHECKS = (
    ("local ast.parse of pool_configurator.py", r"^pool_configurator py ok$"),
    ("local bash -n of the serve script", r"^serve ok$"),
    ("grep -c debug markers in memory_pool_host.py = 0", r"^0\n\(0 = clean\)$"),
    ("remote ast.parse of the deployed pool_configurator.py", r"^deployed pool_configurator ok$"),
    ("grep -c hierarchical in the serve script = 0", r"^prefill hicache: 0 \(0=off\)$"),
)


@dataclass(frozen=True)
class Run:
    seconds: float
    client_runs: int  # ssh programs started (the wrapper's log)
    accepted: int  # connections sshd authenticated (its log)
    checks: int  # checks that ran
    passed: int  # of which passed
    kinds: str  # how the checks split up
    tree: dict[str, str]  # file -> sha256 after the run (.git and .patchkit left out)
    git_status: str
    later_kept: bool  # the fork's later commit to memory_pool_host.py still in the file


def later_kept(fork: DemoFork) -> bool:
    """Whether the host pool still holds the fork's later commit (the article's complaint:
    ``git checkout <dead>^ -- file`` silently drops later commits to the file)."""
    return LATER_EDIT[1] in (fork.sglang / HOST_POOL).read_text(encoding="utf-8")


def tree_of(fork: DemoFork) -> dict[str, str]:
    out = {}
    for name, root in (("sglang", fork.sglang), ("serve", fork.serve)):
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if rel.parts[0] in (".git", ".patchkit") or not path.is_file():
                continue
            out[f"{name}:{rel}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def git_status(fork: DemoFork) -> str:
    out = subprocess.run(["git", "status", "--porcelain"], cwd=fork.sglang, check=True,
                         capture_output=True, text=True).stdout
    return ", ".join(f"`{line}`" for line in out.splitlines()) or "clean"


def copy_fork(fork: DemoFork, dest: Path) -> DemoFork:
    """A fresh copy of a pristine fork (the checkout borrows the upstream's objects)."""
    shutil.copytree(fork.workdir, dest, symlinks=True)
    return DemoFork(dest, dest / fork.sglang.relative_to(fork.workdir),
                    dest / fork.serve.relative_to(fork.workdir), fork.release, fork.commits)


def timed(server: LoopbackSshd, argv: list[str]) -> tuple[float, int, int, subprocess.CompletedProcess[str]]:
    runs, accepted = server.client_runs(), server.accepted()
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - start
    return seconds, server.client_runs() - runs, server.accepted() - accepted, proc


def run_patchkit(server: LoopbackSshd, fork: DemoFork, python: str) -> Run:
    argv = [sys.executable, "-m", "patchkit", "--catalog", str(REPO), "apply", *SEED_FIXES,
            "--target", f"ssh://{server.user}@{server.host}:{server.port}{fork.sglang}",
            "--root", f"serve={fork.serve}", "--python", python,
            "--ssh-program", str(server.ssh_program), "--json"]
    seconds, runs, accepted, proc = timed(server, argv)
    if proc.returncode != 0:
        raise SystemExit(f"patchkit apply failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    fixes = json.loads(proc.stdout)["fixes"]
    pre = [c for f in fixes for c in f["preconditions"]]
    ver = [c for f in fixes for c in f["verification"]]
    kinds = f"{len(pre)} preconditions + {len(ver)} verifications"
    return Run(seconds, runs, accepted, len(pre) + len(ver), sum(bool(c["ok"]) for c in pre + ver),
               kinds, tree_of(fork), git_status(fork), later_kept(fork))


def stage_seed_edits(fork: DemoFork, stage: Path) -> None:
    """The two files the seed had edited locally before deploying (untimed, as in the seed)."""
    scratch = Path(tempfile.mkdtemp(prefix="patchkit-bench-edit-"))
    try:
        edit = copy_fork(fork, scratch / "fork")
        for fix, cwd in (("dsv4-bf16-sizing", edit.sglang), ("prefill-hicache-off", edit.serve)):
            if cwd == edit.serve:
                subprocess.run(["git", "init", "-q"], cwd=cwd, check=True)  # git apply here, not above
            for patch in sorted((REPO / "patches" / fix).glob("*.patch")):
                subprocess.run(["git", "apply", str(patch)], cwd=cwd, check=True, capture_output=True)
        stage.mkdir(parents=True)
        shutil.copy2(edit.sglang / POOL, stage / "pool_configurator.py")
        shutil.copy2(edit.serve / SERVE_SCRIPT, stage / SERVE_SCRIPT)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_seed(server: LoopbackSshd, fork: DemoFork, python: str, stage: Path) -> Run:
    dead = dict(fork.commits)["hicache-index-k-sync"][:9]
    for path in (stage, fork.sglang, fork.serve, Path(python)):
        if not re.fullmatch(r"[A-Za-z0-9_./+-]+", str(path)):
            raise SystemExit(f"the seed's command quotes nothing; use a plain path instead of {path}")
    script = SEED_COMMAND.format(python=python, stage=stage, ssh=server.ssh_program, port=server.port,
                                 dest=f"{server.user}@{server.host}", sglang=fork.sglang,
                                 serve=fork.serve, dead=dead)
    seconds, runs, accepted, proc = timed(server, ["bash", "-c", script])
    said = proc.stdout.strip()
    passed = sum(bool(re.search(pattern, said, re.M)) for _, pattern in SEED_CHECKS)
    return Run(seconds, runs, accepted, len(SEED_CHECKS), passed, "3 syntax checks + 2 greps",
               tree_of(fork), git_status(fork), later_kept(fork))


def run_cli_startup(server: LoopbackSshd) -> float:
    """`patchkit --version`: the local start-up every patchkit command pays before connecting."""
    seconds, _runs, _accepted, proc = timed(server, [sys.executable, "-m", "patchkit", "--version"])
    if proc.returncode != 0:
        raise SystemExit(f"patchkit --version failed:\n{proc.stderr}")
    return seconds


def run_bare_ssh(server: LoopbackSshd) -> float:
    """One connection doing nothing (`ssh host true`): the floor of any remote step here."""
    seconds, _runs, _accepted, proc = timed(
        server, [str(server.ssh_program), "-p", str(server.port), f"{server.user}@{server.host}", "true"])
    if proc.returncode != 0:
        raise SystemExit(f"ssh to the benchmark server failed:\n{proc.stderr}")
    return seconds


def machine() -> dict[str, str]:
    ssh = subprocess.run(["ssh", "-V"], capture_output=True, text=True)
    cpu = ""
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = f" ({found.group(1).strip()})" if found else ""
    except OSError:
        pass
    return {
        "cores": f"{os.cpu_count()} cores{cpu}",
        "python": platform.python_version(),
        "openssh": (ssh.stderr or ssh.stdout).strip().split(",")[0],
        "system": platform.system(),
        "load": f"{os.getloadavg()[0]:.1f}",
    }


def seconds(values: list[float]) -> tuple[str, str]:
    return f"{statistics.median(values):.2f} s", f"{min(values):.2f} s"


def report(results: dict[str, list[Run]], bare: list[float], startup: list[float], facts: dict[str, str], repeat: int) -> str:
    pk, seed = results["patchkit"], results["seed"]

    def same(runs: list[Run], attr: Callable[[Run], object]) -> str:
        return " or ".join(sorted({str(attr(r)) for r in runs}))

    def row(name: str, runs: list[Run], checked: str) -> str:
        med, low = seconds([r.seconds for r in runs])
        conns = f"{same(runs, lambda r: r.client_runs)} / {same(runs, lambda r: r.accepted)}"
        passed = f"{same(runs, lambda r: r.passed)} of {same(runs, lambda r: r.checks)} passed"
        return f"| {name} | {med} | {low} | {conns} | {same(runs, lambda r: r.kinds)} ({passed}); {checked} |"

    diff = sorted(k for k in set(pk[0].tree) | set(seed[0].tree) if pk[0].tree.get(k) != seed[0].tree.get(k))
    stable = all(r.tree == pk[0].tree for r in pk) and all(r.tree == seed[0].tree for r in seed)
    bare_med, bare_low = seconds(bare)
    start_med, start_low = seconds(startup)
    return "\n".join([
        SECTION,
        "",
        f"Measured by `python bench/remote_vs_seed.py` on {datetime.date.today().isoformat()}: the "
        "seed's three fixes (`" + " ".join(SEED_FIXES) + "`) deployed to the demo fork (SGLang "
        f"{demo_release(Catalog(REPO))} with the bf16 index-K and the dead HiCache commits, "
        "`patchkit.demo.build_fork`) "
        f"over a loopback sshd, each approach on a fresh copy of the fork, N = {repeat} each, "
        "interleaved, in one run. Wall time is the whole command as a user runs it (patchkit: "
        "the CLI process, Python start-up included; seed: its bash command, local checks "
        "included). Connections: ssh clients started (a counting wrapper, given to `scp -S` "
        "too) / connections sshd authenticated (its log).",
        "",
        f"Machine: {facts['cores']}, {facts['system']}, Python {facts['python']}, "
        f"{facts['openssh']}; 1-minute load average {facts['load']} when the run ended "
        "(other work on the machine shows up as spread between median and min).",
        "",
        "| approach | wall time, median | min | connections (client / server) | what it checked |",
        "|---|---|---|---|---|",
        row("patchkit: `patchkit apply` of the 3 fixes, `--target ssh://...`", pk,
            "release, dependencies, touched files clean against git, writable, the manifests' "
            "greps; then syntax, greps and the sizing script `checks/bytes_per_token.py`. Any "
            "failure rolls every file back"),
        row("seed: `ast.parse` + `bash -n` locally, 2 × `scp`, 1 × `ssh` script", seed,
            "printed for a human to read; nothing stops on a failure (`set +e`)"),
        f"| for scale: one `ssh host true` | {bare_med} | {bare_low} | 1 / 1 | nothing |",
        f"| for scale: `patchkit --version` (local start-up) | {start_med} | {start_low} | 0 / 0 | nothing |",
        "",
        f"patchkit's median is {statistics.median([r.seconds for r in pk]) / statistics.median([r.seconds for r in seed]):.2f} "
        "times the seed's. Both are dominated by connection set-up (the bare `ssh` row): the "
        "seed pays it three times; patchkit pays it once, plus its own start-up (the "
        f"`--version` row) and its {same(pk, lambda r: r.checks)} checks, which run on the host "
        "inside the same session.",
        "",
        "Result trees (every file of the checkout and the serve folder; `.git` and `.patchkit/` "
        "left out): " + ("the same in every repetition of each approach; " if stable else
                         "NOT the same in every repetition; ")
        + ("patchkit's and the seed's are byte-identical." if not diff
           else "patchkit's and the seed's differ in: " + ", ".join(f"`{d}`" for d in diff) + "."),
        f"The fork's later commit to `memory_pool_host.py` (\"{LATER_SUBJECT}\", made after the "
        "dead commit): " + ("kept" if all(r.later_kept for r in pk) else "LOST")
        + " by patchkit's revert (a three-way merge onto today's file); "
        + ("kept" if all(r.later_kept for r in seed) else "silently lost")
        + " by the seed's `git checkout <dead commit>^ --`"
        + (", which is the difference between the two trees." if diff and not
           all(r.later_kept for r in seed) else "."),
        f"`git status --porcelain` after patchkit: {pk[0].git_status}; after the seed: "
        f"{seed[0].git_status} (`git checkout <rev> -- file` also stages the file). patchkit "
        "also leaves its record in `.patchkit/` (git-ignored), which `patchkit status` and "
        "`patchkit rollback` read; the seed's procedure leaves nothing to check or undo it with.",
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per approach (default 5)")
    parser.add_argument("--workdir", type=Path, help="where to build the forks (default: a temp dir, removed)")
    parser.add_argument("--upstream", type=Path, help="patchkit upstream repository (default: patchkit's cache)")
    parser.add_argument("--wheels", type=Path, help="directory of downloaded SGLang wheels to reuse")
    parser.add_argument("--python", default=sys.executable,
                        help="the host's interpreter for both approaches (default: this one)")
    parser.add_argument("--write-doc", type=Path, help="replace this benchmark's section in that file")
    args = parser.parse_args()

    catalog = Catalog(REPO)
    upstream = UpstreamRepo(args.upstream, wheels=args.wheels) if args.upstream or args.wheels else UpstreamRepo()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="patchkit-bench-")).resolve()
    try:
        say = lambda msg: print(f"  {msg}", file=sys.stderr)  # noqa: E731
        print("building the demo fork twice (one per approach)", file=sys.stderr)
        forks = {tool: build_fork(workdir / f"fork-{tool}", catalog, upstream=upstream, progress=say)
                 for tool in ("patchkit", "seed")}
        stage = workdir / "seed-edits"
        stage_seed_edits(forks["seed"], stage)
        results: dict[str, list[Run]] = {"patchkit": [], "seed": []}
        bare: list[float] = []
        startup: list[float] = []
        with loopback_sshd() as server:
            for i in range(args.repeat):
                bare.append(run_bare_ssh(server))
                startup.append(run_cli_startup(server))
                for tool in ("patchkit", "seed"):
                    fork = copy_fork(forks[tool], workdir / "runs" / f"{tool}-{i}")
                    if tool == "patchkit":
                        run = run_patchkit(server, fork, args.python)
                    else:
                        run = run_seed(server, fork, args.python, stage)
                    results[tool].append(run)
                    print(f"{tool} #{i + 1}: {run.seconds:.2f} s, {run.client_runs} ssh, "
                          f"{run.passed}/{run.checks} checks passed", file=sys.stderr)
                    shutil.rmtree(fork.workdir)
        section = report(results, bare, startup, machine(), args.repeat)
        print(section)
        if args.write_doc:
            write_section(args.write_doc, section)
            print(f"wrote {args.write_doc}", file=sys.stderr)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
