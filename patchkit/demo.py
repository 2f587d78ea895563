"""The demo production fork: the seed's DeepSeek-V4 server (a release with two commits on top
and a prefill serve script with HiCache on), rebuilt from the catalog for ``patchkit demo``.
The fork and the serve folder are git repositories of their own, so the ``git-clean``
precondition looks only at them wherever the workdir lies."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import gitrepo
from .catalog import Catalog
from .errors import UsageError
from .upstream import UpstreamRepo, version_key

#: The commits on the seed's fork, in order.
FORK_COMMITS = ("dsv4-bf16-index-k", "hicache-index-k-sync")
#: What the seed deployed in one hand-written command.
SEED_FIXES = ("dsv4-bf16-sizing", "revert-hicache-index-k-sync", "prefill-hicache-off")
SERVE_SCRIPT = "serve_dsv4_prefill.sh"
HOST_POOL = "python/sglang/srt/mem_cache/memory_pool_host.py"
#: A later, unrelated commit to the file the dead fix changed: the revert must keep it, where
#: the seed's `git checkout <dead>^ -- memory_pool_host.py` silently threw it away.
LATER_SUBJECT = "memory_pool_host: say the V4 state host pool is pinned"
LATER_EDIT = ('    """Host pool for V4 CompressStatePool page rows."""',
              '    """Host pool for V4 CompressStatePool page rows (pinned host memory)."""')
_MARKER = ".patchkit-demo"
_FORK_AUTHOR = gitrepo.Identity("Inference Team", "infra@example.invalid")


@dataclass(frozen=True)
class DemoFork:
    workdir: Path
    sglang: Path  # the fork checkout: root `sglang`
    serve: Path  # the folder holding the serve script: root `serve`
    release: str
    commits: tuple[tuple[str, str], ...]  # (fix name, commit sha)
    later: str = ""  # the later commit to memory_pool_host.py, HEAD of the fork


def demo_releases(catalog: Catalog) -> tuple[str, ...]:
    """The releases every fix the demo commits or deploys supports, oldest first (a fix with no
    ``releases`` supports any)."""
    supported: set[str] | None = None
    for name in dict.fromkeys(FORK_COMMITS + SEED_FIXES):
        fix = catalog.get(name)  # every variant counts: the engine picks the release's
        releases = [r for v in fix.all_variants() for r in v.upstream.releases]
        if releases:
            supported = set(releases) if supported is None else supported & set(releases)
    return tuple(sorted(supported or (), key=version_key))


def demo_release(catalog: Catalog, release: str | None = None) -> str:
    """``release`` when every fix the demo deploys supports it (else refused, naming the ones
    they do); without it, the newest of :func:`demo_releases`, what ``patchkit demo`` builds."""
    supported = demo_releases(catalog)
    if release is not None and release not in supported:
        raise UsageError(
            f"the demo cannot build SGLang {release}: the fixes it deploys support "
            + (", ".join(supported) if supported else "no common release")
            + f" (the releases of their versions, upstream.releases and each [[variants]] "
            f"entry's, in {catalog.root / 'manifests'}); pass "
            + (f"--release {supported[-1]}" if supported else "another catalog"),
            release=release, supported=list(supported),
        )
    if not supported:
        raise UsageError("no release is supported by every fix the demo deploys ("
                         + ", ".join(dict.fromkeys(FORK_COMMITS + SEED_FIXES))
                         + "); check the releases of their versions (upstream.releases and [[variants]]) in "
                         + str(catalog.root))
    return release or supported[-1]


def serve_script_source(catalog: Catalog) -> Path:
    """The seed's prefill serve script, in the catalog or the shipped one kept beside it."""
    places = [catalog.root] + ([catalog.beside.root] if catalog.beside is not None else [])
    paths = [root / "docs" / "examples" / SERVE_SCRIPT for root in places]
    for path in paths:
        if path.is_file():
            return path
    raise UsageError(
        f"the demo needs {paths[0]} (the original prefill serve script, shipped with patchkit); "
        "run it with the shipped catalog (outside any catalog of yours, or --catalog pointing at "
        "it), or from a catalog made by patchkit init, which keeps the shipped fixes beside yours",
        path=str(paths[0]))


def check_workdir(workdir: Path) -> Path:
    """``workdir`` resolved, when it is new, empty or an earlier demo's (which is replaced);
    another directory is refused before anything is said or done."""
    workdir = Path(workdir).resolve()
    if workdir.exists() and any(workdir.iterdir()) and not (workdir / _MARKER).exists():
        raise UsageError(f"{workdir} exists and was not made by `patchkit demo`; pass an "
                         "empty or new directory with --workdir", path=str(workdir))
    return workdir


def build_fork(workdir: Path, catalog: Catalog, *, release: str | None = None,
               upstream: UpstreamRepo | None = None,
               progress: Callable[[str], None] | None = None) -> DemoFork:
    """Fetch ``release`` (default :func:`demo_release`; an unsupported one is refused first) and
    lay out the fork and serve folder under ``workdir``, replacing an earlier demo's."""
    say = progress or (lambda _msg: None)
    release = demo_release(catalog, release)
    workdir = check_workdir(workdir)
    if workdir.exists() and any(workdir.iterdir()):
        shutil.rmtree(workdir)
    script = serve_script_source(catalog)
    upstream = upstream or UpstreamRepo()
    if release not in upstream.versions():
        say(f"fetching SGLang {release} from PyPI")
        upstream.fetch(release, progress=say)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / _MARKER).write_text("made by patchkit demo\n")

    say(f"checking out SGLang {release}")
    sglang = upstream.checkout(release, workdir / "sglang-dsv4")
    gitrepo.create_branch(sglang, "production")
    commits = []
    for name in FORK_COMMITS:
        fix = catalog.get(name).variant_for(release) or catalog.get(name)
        say(f"committing {name} on the fork")
        sha = gitrepo.apply_and_commit(sglang, [p.path for p in fix.patches],
                                       message=f"{fix.title}\n\n{fix.rationale.strip()}\n",
                                       author=_FORK_AUTHOR, date="2026-11-10T12:00:00+00:00")
        commits.append((name, sha))
    host = sglang / HOST_POOL
    text = host.read_text(encoding="utf-8")
    if text.count(LATER_EDIT[0]) != 1:
        raise UsageError(f"SGLang {release}'s {HOST_POOL} lacks the line the demo's later commit "
                         f"edits ({LATER_EDIT[0].strip()}); use release {demo_release(catalog)}")
    host.write_text(text.replace(*LATER_EDIT), encoding="utf-8")
    say("committing a later change to memory_pool_host.py")
    later = gitrepo.commit_paths(sglang, [HOST_POOL], message=LATER_SUBJECT + "\n",
                                 author=_FORK_AUTHOR, date="2026-11-12T12:00:00+00:00")
    serve = workdir / "serve"
    serve.mkdir()
    shutil.copy2(script, serve / SERVE_SCRIPT)
    gitrepo.init(serve)  # its own repository: see the module docstring
    gitrepo.commit_paths(serve, [SERVE_SCRIPT], message="prefill serve script, HiCache on\n",
                         author=_FORK_AUTHOR, date="2026-11-10T12:00:00+00:00")
    return DemoFork(workdir, sglang, serve, release, tuple(commits), later)
