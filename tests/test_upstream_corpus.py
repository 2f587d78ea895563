"""rebase --dry-run, the real rebase and `upstream check` on real SGLang commits carried as
fixes (tests/upstream_corpus/, true answers from the real history: tests/fixtures/
upstream_corpus.py), on patchkit's release-only upstream and on a clone (``--repo``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit import rebase
from patchkit.rebase import contains
from patchkit.catalog import Catalog
from patchkit.cli.main import cli
from patchkit.upstream import UpstreamRepo
from tests.fixtures.upstream_corpus import RELEASES, entries, write_catalog

pytestmark = pytest.mark.network

#: what may be said of a fix whose true answer is ... (a clean outcome writes the fix:
#: only right where the fix is still needed)
WRITES = {"unchanged", "offset", "merged", "reverted-upstream"}
STOPS = {"conflict", "ambiguous", "removed-upstream", "anchor-gone"}
ALLOWED = {
    "upstream": {"upstream"} | STOPS - {"removed-upstream"},
    "ambiguous": {"upstream", "ambiguous", "conflict"},
    "removed-upstream": {"upstream", "removed-upstream", "conflict", "ambiguous"},
    "still-needed": WRITES | {"conflict", "anchor-gone", "ambiguous"},
    "reverted": WRITES | {"conflict", "removed-upstream", "ambiguous"},
}


def _truth(answer: str) -> str:
    return "reverted" if answer.startswith("reverted-upstream-in") else answer


def _kinds(report: rebase.RebaseReport) -> dict[str, str]:
    return {f.name: (f.patches[-1].classification if f.patches else f.outcome)
            for f in report.fixes}


@pytest.fixture(scope="session")
def corpus_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_catalog(tmp_path_factory.mktemp("corpus-catalog") / "catalog")


def _copy(src: Path, dest: Path) -> Catalog:
    shutil.copytree(src, dest)
    return Catalog(dest)


@pytest.fixture(scope="session")
def dry_runs(corpus_catalog: Path, corpus_releases: UpstreamRepo, corpus_clone: Path,
             tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, str]]:
    """(upstream kind, release) -> fix -> classification of `rebase --dry-run`."""
    out = {}
    for kind in ("releases", "clone"):
        for version in RELEASES:
            cat = _copy(corpus_catalog, tmp_path_factory.mktemp("dry") / "c")
            report = rebase.start(cat, version, upstream=corpus_releases if kind == "releases"
                                  else None, repo=corpus_clone if kind == "clone" else None,
                                  dry_run=True)
            out[kind, version] = _kinds(report)
    return out


def test_every_dry_run_outcome_agrees_with_the_real_history(dry_runs) -> None:
    wrong, table = [], []
    for e in entries():
        for (kind, version), kinds in dry_runs.items():
            got, truth = kinds[e.name], _truth(e.answers[version])
            table.append(f"{kind:8} {version} {e.name} {truth:16} {got}")
            if got not in ALLOWED[truth]:
                wrong.append(table[-1])
    print("\n".join(table))
    assert not wrong, "\n".join(wrong)


def test_truly_upstream_fixes_are_detected_on_the_release_only_upstream(dry_runs) -> None:
    upstream = [(e.name, v) for e in entries() for v in RELEASES if e.answers[v] == "upstream"]
    found = [(n, v) for n, v in upstream if dry_runs["releases", v][n] == "upstream"]
    assert len(upstream) >= 20
    assert len(found) >= 0.9 * len(upstream), sorted(set(upstream) - set(found))


def test_no_reverted_commit_is_reported_upstream_with_the_clone(dry_runs) -> None:
    reverted = [(e.name, v) for e in entries() for v in RELEASES
                if e.answers[v].startswith("reverted-upstream-in")]
    assert len({n for n, _v in reverted}) >= 2
    for name, v in reverted:  # applied as needed again, or a stop where upstream moved on
        assert dry_runs["clone", v][name] in ("reverted-upstream", "conflict"), (name, v)
        assert dry_runs["releases", v][name] != "upstream", (name, v)
    assert "reverted-upstream" in {dry_runs["clone", v][n] for n, v in reverted}


def test_the_real_rebase_agrees_with_its_dry_run_and_never_crashes(
        corpus_catalog: Path, corpus_releases: UpstreamRepo, dry_runs, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`rebase --all` onto 0.5.17 through the CLI, skipping every stop: each stop is one the
    dry run announced, each fix written is one it said applies, no exit 70."""
    cat = _copy(corpus_catalog, tmp_path / "c")
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(corpus_releases.path))
    runner = CliRunner()
    args = ["--catalog", str(cat.root), "rebase", "--all", "--onto", "0.5.17", "--json"]
    seen: dict[str, str] = {}
    for _ in range(len(entries()) + 1):
        res = runner.invoke(cli, args)
        assert res.exit_code in (0, 3), res.output
        data = json.loads(res.stdout)
        for f in data["fixes"]:
            seen.setdefault(f["name"], f["patches"][-1]["classification"] if f["patches"]
                            else f["outcome"])
        if data["done"]:
            break
        args = ["--catalog", str(cat.root), "rebase", "--skip", "--json"]
    else:
        raise AssertionError("the rebase never finished")
    planned = dry_runs["releases", "0.5.17"]
    assert {n: k for n, k in seen.items() if k != "skipped"} == \
        {n: k for n, k in planned.items() if n in seen and seen[n] != "skipped"}


@pytest.mark.parametrize("kind", ["releases", "clone"])
def test_upstream_check_agrees_with_the_real_history(kind: str, corpus_catalog: Path,
                                                     corpus_releases: UpstreamRepo,
                                                     corpus_clone: Path) -> None:
    cat = Catalog(corpus_catalog)
    repo = corpus_releases if kind == "releases" else UpstreamRepo(corpus_clone)
    said = {"upstream": {contains.CONTAINED, contains.AMBIGUOUS, contains.NOT_CONTAINED},
            "ambiguous": {contains.CONTAINED, contains.AMBIGUOUS, contains.NOT_CONTAINED},
            "removed-upstream": {contains.CONTAINED, contains.REMOVED, contains.NOT_CONTAINED,
                                 contains.AMBIGUOUS},
            "still-needed": {contains.NOT_CONTAINED, contains.AMBIGUOUS},
            "reverted": {contains.NOT_CONTAINED, contains.REVERTED, contains.REMOVED,
                         contains.AMBIGUOUS}}
    wrong, hits, total = [], 0, 0
    for version in RELEASES:
        verdicts = {v.fix: v for v in contains.check(cat, [e.name for e in entries()], version,
                                                     upstream=repo)}
        for e in entries():
            truth, got = _truth(e.answers[version]), verdicts[e.name].verdict
            if got not in said[truth]:
                wrong.append(f"{version} {e.name} {truth} {got}: {verdicts[e.name].detail}")
            if truth == "upstream":
                total += 1
                hits += got == contains.CONTAINED
            if truth == "reverted" and kind == "clone":
                assert got == contains.REVERTED, (e.name, version)
    assert not wrong, "\n".join(wrong)
    assert hits >= 0.9 * total, (hits, total)


def test_upstream_check_fetches_the_releases_it_needs(corpus_catalog: Path, sglang_wheels: Path,
                                                      tmp_path: Path) -> None:
    """A fresh release store: the check fetches the fix's base and the release itself (from
    the package registry, here the wheels cache), saying so, then decides."""
    repo = UpstreamRepo(tmp_path / "store", wheels=sglang_wheels)
    said: list[str] = []
    name = next(e.name for e in entries() if e.answers["0.5.16"] == "upstream")
    (v,) = contains.check(Catalog(corpus_catalog), [name], "0.5.16", upstream=repo,
                          progress=said.append)
    assert v.verdict == contains.CONTAINED, v
    assert repo.versions() == ["0.5.15", "0.5.16"]
    assert any("0.5.15" in s for s in said) and any("0.5.16" in s for s in said)
