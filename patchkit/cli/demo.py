"""`patchkit demo`: the README's main job, end to end on a real SGLang release."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from .. import api, hooks
from ..catalog import Catalog, lineage
from . import render, render_status
from .render_history import render_log
from ..demo import SEED_FIXES, DemoFork, build_fork, check_workdir, demo_release
from ..targets import LocalTarget
from .common import RELEASE, State, command


def _step(console: Any, number: int, title: str, command: str | None = None) -> None:
    render.line(console, [])
    if isinstance(console, render.PlainConsole):
        render.line(console, [(f"{number}. {title}", "")])
    else:
        from rich.text import Text

        console.rule(Text(f"{number}. {title}", style="bold"), align="left")
    if command:
        render.line(console, [(f"$ {command}", "dim")])


@command("demo", click.option("--workdir", default="patchkit-demo", show_default=True,
                              type=click.Path(file_okay=False),
                              help="Where to build the demo fork (replaced if an earlier demo made it)."),
         click.option("--release", default=None, metavar="V", type=RELEASE,
                      help="SGLang release of the fork: one every fix of the demo supports "
                           "(default: the newest such; others are refused, naming them)."))
def demo(state: State, workdir: str, release: str | None, as_json: bool) -> int:
    """Build a production-like fork of a real SGLang release and deploy its three fixes to it."""
    catalog = state.catalog()
    release = demo_release(catalog, release)  # an unsupported one is refused before step 1
    check_workdir(Path(workdir))  # and so is a directory that is not an earlier demo's
    if as_json:
        return _demo_json(catalog, Path(workdir), release)
    out = render.stdout()
    # Step titles stay short: on a terminal a rule cuts what does not fit on one line.
    _step(out, 1, f"build a production fork of SGLang {release}")
    out.print("  commits: bf16 index-K, the dead HiCache fix, a later change to memory_pool_host.py;"
              " HiCache on in the serve script")
    with render.busy("building the fork") as spinner:
        fork = build_fork(Path(workdir), catalog, release=release, progress=spinner.update)
    for name, sha in fork.commits:
        out.print(f"  fork commit {sha[:12]}  {name}")
    if fork.later:
        out.print(f"  fork commit {fork.later[:12]}  a later change to memory_pool_host.py (the revert must keep it)")
    out.print(f"  fork: {fork.sglang}\n  serve scripts: {fork.serve}")

    target = _target(fork)
    where = f"--target {shlex.quote(str(fork.sglang))} --root serve={shlex.quote(str(fork.serve))}"
    fixes = " ".join(SEED_FIXES)

    _step(out, 2, "status before", f"patchkit status --all {where}")
    render_status.render_status(out, api.status(catalog, target), verbose=True)

    _step(out, 3, "dry run: every precondition, where each hunk lands; nothing written",
          f"patchkit apply --dry-run {fixes} {where}")
    render.render_result(out, api.apply(catalog, target, SEED_FIXES, dry_run=True), show_diff=False)

    _step(out, 4, "apply all three, all or nothing, then verify", f"patchkit apply {fixes} {where}")
    applied = api.apply(catalog, target, SEED_FIXES)
    render.render_result(out, applied)
    changed = hooks.changed_fixes(applied)
    # what the deploy takes effect with: the restart the seed's deploy never said it needed
    # the demo defines no [restarts]: the hint says to define one, as a real apply's does
    render_status.render_after(out, None, tuple(dict.fromkeys(
        r for name in changed for r in catalog.get(name).restart)), defined=False)

    _step(out, 5, "status after", f"patchkit status {where}")
    after = api.status(catalog, target)
    render_status.render_status(out, after)

    _step(out, 6, "lineage of the fixes", f"patchkit log {where}")
    render_log(out, lineage.build(catalog, target_status=after))
    render.line(out, [])
    render.line(out, [("done", "bold green"), (f": roll back with `patchkit rollback {fixes} {where}`", "")])
    return 0


def _target(fork: DemoFork) -> LocalTarget:
    # named as the commands the transcript shows name it (`apply on sglang=..., serve=...`)
    roots = {"sglang": str(fork.sglang), "serve": str(fork.serve)}
    return LocalTarget(roots=roots, description=", ".join(f"{n}={p}" for n, p in roots.items()))


def _demo_json(catalog: Catalog, workdir: Path, release: str) -> int:
    """The same steps, each step's result as ``patchkit ... --json`` prints it, in one object."""
    fork = build_fork(workdir, catalog, release=release)
    target = _target(fork)
    steps: dict[str, Any] = {"status_before": api.status(catalog, target).to_json(),
                             "dry_run": api.apply(catalog, target, SEED_FIXES, dry_run=True).to_json(),
                             "apply": api.apply(catalog, target, SEED_FIXES).to_json()}
    after = api.status(catalog, target)
    steps["status_after"] = after.to_json()
    steps["lineage"] = lineage.build(catalog, target_status=after).to_json()
    render.print_json({
        "fork": {"workdir": str(fork.workdir), "sglang": str(fork.sglang), "serve": str(fork.serve),
                 "release": fork.release, "later": fork.later,
                 "commits": [{"fix": name, "sha": sha} for name, sha in fork.commits]},
        "target": {"sglang": str(fork.sglang), "serve": str(fork.serve)},
        "fixes": list(SEED_FIXES),
        **steps,
    })
    return 0


COMMANDS = [demo]
