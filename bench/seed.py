"""The seed's three fixes deployed to the demo fork, locally and over SSH, against the seed's
own procedure.

The seed deployed its fixes with one hand-written bash command: check two locally edited files
(``ast.parse``, ``bash -n``), ``scp`` each to the host, then one ``ssh`` that restores
memory_pool_host.py with ``git checkout <dead commit>^ --``, greps for leftover debug markers,
deletes stale ``.pyc`` files, re-parses the deployed file and greps the serve script. Each
repetition runs, on fresh copies of the demo fork (made once by ``patchkit demo``), for every
patchkit version: ``patchkit apply`` of the three fixes on the local fork and over a loopback
sshd (connections counted by a wrapper ssh program and in sshd's log), then the seed's command.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import NEUTRAL, REPO, Sample, Version, cli, fmt, measure, say
from sshd import LoopbackSshd, loopback_sshd

SECTION = "## The seed's three fixes, locally and over SSH"
FIXES = ("dsv4-bf16-sizing", "revert-hicache-index-k-sync", "prefill-hicache-off")
POOL = "python/sglang/srt/model_executor/pool_configurator.py"
HOST_POOL = "python/sglang/srt/mem_cache/memory_pool_host.py"
SERVE_SCRIPT = "serve_dsv4_prefill.sh"

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
SEED_CHECKS = (r"^pool_configurator py ok$", r"^serve ok$", r"^0\n\(0 = clean\)$",
               r"^deployed pool_configurator ok$", r"^prefill hicache: 0 \(0=off\)$")


@dataclass(frozen=True)
class Fork:
    workdir: Path
    sglang: Path
    serve: Path
    release: str
    dead: str  # the dead HiCache commit
    later: str  # the later commit to memory_pool_host.py the revert must keep


@dataclass(frozen=True)
class Run:
    sample: Sample
    client_runs: int  # ssh programs started (the wrapper's log)
    accepted: int  # connections sshd authenticated (its log)
    checks: int  # checks that ran
    passed: int  # of which passed
    tree: dict[str, str]  # file -> sha256 afterwards (.git and .patchkit left out)
    git_status: str
    later_kept: bool


def make_fork(version: Version, workdir: Path) -> Fork:
    """The demo fork, pristine: ``patchkit demo`` builds it (and deploys the fixes, which are
    then undone with git, so the copies start as the seed's server was)."""
    fork = json.loads(cli(version, "demo", "--workdir", str(workdir / "demo"), "--json"))["fork"]
    for root in (fork["sglang"], fork["serve"]):
        for args in (["reset", "-q", "--hard", "HEAD"], ["clean", "-q", "-f", "-d", "-x"]):
            subprocess.run(["git", *args], cwd=root, check=True)
    dead = next(c["sha"] for c in fork["commits"] if c["fix"] == "hicache-index-k-sync")
    return Fork(Path(fork["workdir"]), Path(fork["sglang"]), Path(fork["serve"]), fork["release"],
                dead, fork["later"])


def copy_fork(fork: Fork, dest: Path) -> Fork:
    shutil.copytree(fork.workdir, dest, symlinks=True)
    return Fork(dest, dest / fork.sglang.relative_to(fork.workdir),
                dest / fork.serve.relative_to(fork.workdir), fork.release, fork.dead, fork.later)


def _later_lines(fork: Fork) -> list[str]:
    shown = subprocess.run(["git", "show", "--format=", fork.later, "--", HOST_POOL], cwd=fork.sglang,
                           check=True, capture_output=True, text=True).stdout
    return [line[1:] for line in shown.splitlines() if line.startswith("+") and not line.startswith("+++")]


def outcome(fork: Fork, sample: Sample, runs: int, accepted: int, checks: int, passed: int) -> Run:
    tree = {}
    for name, root in (("sglang", fork.sglang), ("serve", fork.serve)):
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if rel.parts[0] not in (".git", ".patchkit") and path.is_file():
                tree[f"{name}:{rel}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=fork.sglang, check=True,
                            capture_output=True, text=True).stdout
    text = (fork.sglang / HOST_POOL).read_text(encoding="utf-8")
    return Run(sample, runs, accepted, checks, passed, tree,
               ", ".join(f"`{line}`" for line in status.splitlines()) or "clean",
               all(line in text for line in _later_lines(fork)))


def counted(server: LoopbackSshd | None, argv: list[str], env: dict[str, str]) -> tuple[Sample, int, int]:
    before = (server.client_runs(), server.accepted()) if server else (0, 0)
    sample = measure(argv, NEUTRAL, env)
    if server is None:
        return sample, 0, 0
    return sample, server.client_runs() - before[0], server.accepted() - before[1]


def run_patchkit(version: Version, fork: Fork, server: LoopbackSshd | None) -> Run:
    target = (f"ssh://{server.user}@{server.host}:{server.port}{fork.sglang}" if server
              else str(fork.sglang))
    extra = ["--ssh-program", str(server.ssh_program)] if server else []
    sample, runs, accepted = counted(server, [version.patchkit, "apply", *FIXES, "--target", target,
                                              "--root", f"serve={fork.serve}", *extra, "--json"],
                                     version.env)
    fixes = json.loads(sample.stdout)["fixes"]
    checks = [c for f in fixes for c in f["preconditions"] + f["verification"]]
    return outcome(fork, sample, runs, accepted, len(checks), sum(bool(c["ok"]) for c in checks))


def stage_seed_edits(fork: Fork, stage: Path) -> None:
    """The two files the seed had edited locally before deploying (untimed, as in the seed):
    the shipped patches, applied with ``git apply`` to a copy of the fork."""
    edit = copy_fork(fork, stage.parent / "seed-edit")
    for fix, cwd in (("dsv4-bf16-sizing", edit.sglang), ("prefill-hicache-off", edit.serve)):
        for patch in sorted((REPO / "patches" / fix).glob("*.patch")):
            subprocess.run(["git", "apply", str(patch)], cwd=cwd, check=True, capture_output=True)
    stage.mkdir(parents=True)
    shutil.copy2(edit.sglang / POOL, stage / "pool_configurator.py")
    shutil.copy2(edit.serve / SERVE_SCRIPT, stage / SERVE_SCRIPT)
    shutil.rmtree(edit.workdir)


def run_seed(server: LoopbackSshd, fork: Fork, python: str, stage: Path) -> Run:
    for path in (stage, fork.sglang, fork.serve, Path(python)):
        if not re.fullmatch(r"[A-Za-z0-9_./+-]+", str(path)):
            raise SystemExit(f"the seed's command quotes nothing; use a plain path instead of {path}")
    script = SEED_COMMAND.format(python=python, stage=stage, ssh=server.ssh_program, port=server.port,
                                 dest=f"{server.user}@{server.host}", sglang=fork.sglang,
                                 serve=fork.serve, dead=fork.dead[:9])
    sample, runs, accepted = counted(server, ["bash", "-c", script], {})
    passed = sum(bool(re.search(p, sample.stdout.strip(), re.M)) for p in SEED_CHECKS)
    return outcome(fork, sample, runs, accepted, len(SEED_CHECKS), passed)


def run(versions: list[Version], repeat: int, quick: bool, workdir: Path):
    """Measure; returns (the section, the before/after rows)."""
    shutil.rmtree(workdir, ignore_errors=True)
    fork = make_fork(versions[-1], workdir)
    stage = workdir / "seed-edits"
    stage_seed_edits(fork, stage)
    python = sys.executable
    local: dict[str, list[Run]] = {v.label: [] for v in versions}
    remote: dict[str, list[Run]] = {v.label: [] for v in versions}
    startup: dict[str, list[Sample]] = {v.label: [] for v in versions}
    seed: list[Run] = []
    bare: list[float] = []
    n = 0

    def fresh() -> Fork:
        nonlocal n
        n += 1
        copy = copy_fork(fork, workdir / "runs" / str(n))
        os.sync()  # as perf.py's trees: patchkit's syncfs must not pay for writing out the copy
        return copy

    with loopback_sshd() as server:
        for i in range(repeat):
            start = time.perf_counter()
            subprocess.run([str(server.ssh_program), "-p", str(server.port),
                            f"{server.user}@{server.host}", "true"], check=True, capture_output=True)
            bare.append(time.perf_counter() - start)
            for v in versions:
                startup[v.label].append(measure([v.patchkit, "--version"], NEUTRAL, v.env))
                for where, results in ((None, local), (server, remote)):
                    copy = fresh()
                    results[v.label].append(run_patchkit(v, copy, where))
                    shutil.rmtree(copy.workdir)
                say(f"seed #{i + 1} {v.label}: local {fmt(local[v.label][-1].sample.seconds)}, "
                    f"ssh {fmt(remote[v.label][-1].sample.seconds)} "
                    f"({remote[v.label][-1].client_runs} connection(s))")
            copy = fresh()
            seed.append(run_seed(server, copy, python, stage))
            shutil.rmtree(copy.workdir)
    return report(versions, fork, local, remote, startup, seed, bare, repeat)


def _same(runs: list[Run], attr) -> str:
    return " or ".join(sorted({str(attr(r)) for r in runs}))


def report(versions, fork, local, remote, startup, seed, bare, repeat):
    after = versions[-1].label

    def row(name: str, runs: list[Run], checked: str) -> str:
        secs = [r.sample.seconds for r in runs]
        return (f"| {name} | {fmt(statistics.median(secs))} | {fmt(min(secs))} | "
                f"{_same(runs, lambda r: r.client_runs)} / {_same(runs, lambda r: r.accepted)} | "
                f"{_same(runs, lambda r: r.passed)} of {_same(runs, lambda r: r.checks)} passed; {checked} |")

    pk_checks = ("release, dependencies, touched files clean against git, writable, the manifests' "
                 "greps; then syntax, greps and the sizing script. Any failure rolls every file back")
    rows = []
    for v in versions:
        rows.append(row(f"patchkit ({v.label}): `patchkit apply` of the 3 fixes, local fork",
                        local[v.label], pk_checks))
        rows.append(row(f"patchkit ({v.label}): the same, `--target ssh://...`", remote[v.label], pk_checks))
    rows.append(row("seed: `ast.parse` + `bash -n` locally, 2 × `scp`, 1 × `ssh` script", seed,
                    "3 syntax checks + 2 greps, printed for a human to read; nothing stops on a failure (`set +e`)"))
    rows.append(f"| for scale: one `ssh host true` | {fmt(statistics.median(bare))} | {fmt(min(bare))} "
                "| 1 / 1 | nothing |")
    for v in versions:
        secs = [s.seconds for s in startup[v.label]]
        rows.append(f"| for scale: `patchkit --version` ({v.label}) | {fmt(statistics.median(secs))} | "
                    f"{fmt(min(secs))} | 0 / 0 | nothing |")
    pk, sd = remote[after], seed
    trees = {f"{kind} ({v.label})": runs[v.label] for v in versions
             for kind, runs in (("local", local), ("ssh", remote))}
    stable = all(r.tree == runs[0].tree for runs in [*trees.values(), sd] for r in runs)
    same_pk = all(runs[0].tree == pk[0].tree for runs in trees.values())
    diff = sorted(k for k in set(pk[0].tree) | set(sd[0].tree) if pk[0].tree.get(k) != sd[0].tree.get(k))
    ratio = statistics.median(r.sample.seconds for r in pk) / statistics.median(r.sample.seconds for r in sd)
    section = "\n".join([
        SECTION, "",
        f"The seed's three fixes (`{' '.join(FIXES)}`) deployed to the demo fork (SGLang "
        f"{fork.release} with the bf16 index-K and the dead HiCache commits, built by `patchkit "
        "demo`), on the local fork and over a loopback sshd, each run on a fresh copy of the "
        f"fork (flushed to disk untimed), N = {repeat}, interleaved; each version keeps its own user cache from one "
        "repetition to the next, as a user's cache is kept (the first starts empty). Wall time is the whole command as a user runs it "
        "(patchkit: the CLI process, Python start-up included; seed: its bash command, local "
        "checks included). Connections: ssh clients started (a counting wrapper, given to "
        "`scp -S` too) / connections sshd authenticated (its log).", "",
        "| approach | wall time, median | min | connections (client / server) | checks |",
        "|---|---|---|---|---|", *rows, "",
        f"patchkit's ({after}) median over SSH is {ratio:.2f} times the seed's. Both are dominated by "
        "connection set-up (the bare `ssh` row): the seed pays it three times, patchkit once, "
        "plus its start-up and its checks, which run on the host inside the same session.", "",
        "Result trees (every file of the checkout and the serve folder; `.git` and `.patchkit/` "
        "left out): " + ("the same in every repetition" if stable else "NOT the same in every repetition")
        + (", and the same for every patchkit version, local and over SSH" if same_pk
           else "; the patchkit versions' trees DIFFER")
        + ("; patchkit's and the seed's are byte-identical." if not diff
           else "; patchkit's and the seed's differ in: " + ", ".join(f"`{d}`" for d in diff) + "."),
        "The fork's later commit to `memory_pool_host.py` (made after the dead commit): "
        + ("kept" if all(r.later_kept for r in pk) else "LOST") + " by patchkit's revert (a three-way "
        "merge onto today's file); " + ("kept" if all(r.later_kept for r in sd) else "silently lost")
        + " by the seed's `git checkout <dead commit>^ --`.",
        f"`git status --porcelain` after patchkit: {pk[0].git_status}; after the seed: "
        f"{sd[0].git_status} (`git checkout <rev> -- file` also stages the file). patchkit also "
        "leaves its record in `.patchkit/` (git-ignored), which `patchkit status` and `patchkit "
        "rollback` read; the seed's procedure leaves nothing to check or undo it with.", ""])
    summary = [
        ("seed deploy, 3 fixes, local fork (all checks, Python start included)",
         {k: [r.sample for r in v] for k, v in local.items()}, None, None),
        ("seed deploy, 3 fixes, `--target ssh://` (loopback sshd)",
         {k: [r.sample for r in v] for k, v in remote.items()}, None,
         {k: f"{_same(v, lambda r: r.client_runs)} / {_same(v, lambda r: r.accepted)}" for k, v in remote.items()}),
        ("`patchkit --version`", startup, None, None),
    ]
    return section, summary
