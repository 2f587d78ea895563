"""Rough edges a fresh-clone new-user trial hit (issue 25): sync on the demo fork, the shipped
catalog of a clone kept read-only, depends_on through export and import, and manifest errors
named in a user's words with file and line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.targets import LocalTarget
from patchkit.upstream import UpstreamRepo

REPO = Path(__file__).resolve().parent.parent
INDEX_K, SIZING = "dsv4-bf16-index-k", "dsv4-bf16-sizing"


@pytest.mark.network
def test_sync_on_the_demo_fork_leaves_out_the_unrecorded_dependency_and_applies_the_rest(
        catalog_upstream: UpstreamRepo, tmp_path: Path) -> None:
    """The demo fork carries dsv4-bf16-index-k as a commit of its own (present, unrecorded):
    sync leaves it out and its dependant is accepted on it, as `apply` accepts it."""
    from patchkit.demo import SEED_FIXES, build_fork

    catalog = Catalog(REPO)
    fork = build_fork(tmp_path / "demo", catalog, upstream=catalog_upstream)
    target = LocalTarget({"sglang": str(fork.sglang), "serve": str(fork.serve)}, sys.executable,
                         "fork")
    for dry_run in (True, False):
        result = api.sync(catalog, target, dry_run=dry_run)
        outcomes = {f.name: f.outcome for f in result.fixes}
        assert result.ok and outcomes[INDEX_K] == "present-unrecorded", outcomes
        assert {outcomes[n] for n in SEED_FIXES} == {"would-apply" if dry_run else "applied"}
        sizing = next(f for f in result.fixes if f.name == SIZING)
        requires = [p for p in sizing.preconditions if p.kind == "requires"]
        assert [p.detail for p in requires] == ["present in the files, not recorded by patchkit"]
    states = {s.name: s.state for s in api.status(catalog, target).status}
    assert states[INDEX_K] == "present-unrecorded" and states[SIZING] == "applied"


def _clone_of_patchkit(dest: Path, package: bool = True) -> Path:
    """A clone's layout, committed: the patchkit package beside its shipped manifests/ and
    patches/ (``python -m patchkit`` run at its root imports this copy)."""
    import shutil

    dest.mkdir()
    if package:
        shutil.copytree(REPO / "patchkit", dest / "patchkit",
                        ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("manifests", "patches"):
        shutil.copytree(REPO / part, dest / part)
    shutil.copy(REPO / "pyproject.toml", dest)
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "a clone"]):
        subprocess.run(["git", *args], cwd=dest, check=True, capture_output=True)
    return dest


def _tree_state(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


def test_new_and_refresh_from_the_root_of_a_clone_refuse_to_write_its_shipped_catalog(
        tmp_path: Path) -> None:
    clone = _clone_of_patchkit(tmp_path / "clone")
    src = tmp_path / "src"
    (src / "python" / "sglang").mkdir(parents=True)
    (src / "python" / "sglang" / "_version.py").write_text('__version__ = "0.5.23"\n')
    (src / "python" / "sglang" / "a.py").write_text("one = 1\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "a release"]):
        subprocess.run(["git", *args], cwd=src, check=True, capture_output=True)
    (src / "python" / "sglang" / "a.py").write_text("one = 11\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PATCHKIT_CATALOG", "PATCHKIT_CONFIG", "PYTHONPATH")}
    # the clone this patchkit runs from (a clone's own venv), then another clone beside it
    # (as for a regular install: the shipped catalog is package data, elsewhere)
    for clone in (clone, _clone_of_patchkit(tmp_path / "beside", package=False)):
        _refused_in(clone, src, env)


def _refused_in(clone: Path, src: Path, env: dict[str, str]) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                          text=True, check=True).stdout
    before = _tree_state(clone)
    for command in (["new", "foo", "--from", str(src)], ["new", "foo", "-n", "--from", str(src)],
                    ["refresh", SIZING, "--from", str(src)],
                    ["refresh", SIZING, "--dry-run", "--from", str(src)]):
        proc = subprocess.run([sys.executable, "-m", "patchkit", *command], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=120)
        said = " ".join(proc.stderr.split())
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert "source tree" in said and "shipped" in said, said
        assert "patchkit init DIR" in said and "--catalog" in said, said
        assert _tree_state(clone) == before
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                          text=True, check=True).stdout == head


def test_export_then_import_keeps_depends_on_and_refuses_a_missing_dependency(
        tmp_path: Path) -> None:
    from patchkit.errors import EXIT_USAGE
    from tests.test_authoring import flat, patchkit

    out = tmp_path / "out"
    exported = patchkit(REPO, "export", INDEX_K, SIZING, "--format", "mbox", "-o", str(out))
    assert exported.exit_code == 0, exported.output
    assert f"Patchkit-Depends-On: {INDEX_K}\n" in (out / f"{SIZING}.mbox").read_text()
    plain = tmp_path / "plain"  # a catalog without the shipped fixes beside it
    for part in ("manifests", "patches"):
        (plain / part).mkdir(parents=True)
    for dry in ((), ("--dry-run",)):
        refused = patchkit(plain, "import", "--mbox", str(out / f"{SIZING}.mbox"), *dry)
        assert refused.exit_code == EXIT_USAGE, refused.output
        said = flat(refused.output)
        assert f"depends on {INDEX_K}" in said and "not in" in said, said
        assert not any((plain / "manifests").iterdir()) and not any((plain / "patches").iterdir())
    # both in one import, renamed: the dependency is the imported copy of it
    both = tmp_path / "both.mbox"
    both.write_bytes((out / f"{INDEX_K}.mbox").read_bytes() + (out / f"{SIZING}.mbox").read_bytes())
    made = patchkit(plain, "import", "--mbox", str(both), "--split", "--name", "mine",
                    "--no-commit")
    assert made.exit_code == 0, made.output
    catalog = Catalog(plain)
    assert catalog.get("mine-2").depends_on == ("mine-1",)
    assert catalog.get("mine-1").depends_on == ()


def _broken_catalog(tmp_path: Path, version_line: str) -> tuple[Path, Path]:
    """A catalog of the shipped serve fix (no SGLang needed), its version line replaced."""
    import shutil

    cat = tmp_path / "cat"
    (cat / "manifests").mkdir(parents=True)
    shutil.copytree(REPO / "patches" / "prefill-hicache-off", cat / "patches" / "myfix")
    text = (REPO / "manifests" / "prefill-hicache-off.toml").read_text()
    text = text.replace('name = "prefill-hicache-off"', 'name = "myfix"', 1)
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("version = "))
    cut = version_line.endswith("[")  # the file ends inside the value
    lines = lines[:at] + [version_line] + ([] if cut else lines[at + 1:])
    manifest = cat / "manifests" / "myfix.toml"
    manifest.write_text("\n".join(lines) + ("\n" if cut else ""))
    return cat, manifest


@pytest.mark.parametrize("version_line, said", [
    ("version = [", "the file ends inside a value"),
    ('version = "two"', "'version' must be an integer"),
    ('version = "two', "a string is not closed on its line"),  # not tomlkit's "control characters"
])
def test_a_broken_manifest_is_named_with_file_and_line_alike_by_list_and_apply(
        tmp_path: Path, version_line: str, said: str) -> None:
    from tests.test_authoring import flat, patchkit

    cat, manifest = _broken_catalog(tmp_path, version_line)
    line = next(i for i, text in enumerate(manifest.read_text().split("\n"), 1)
                if text.startswith("version = "))
    serve = tmp_path / "serve"
    serve.mkdir()
    (serve / "serve_dsv4_prefill.sh").write_bytes(
        (REPO / "docs" / "examples" / "serve_dsv4_prefill.sh").read_bytes())
    listed = flat(patchkit(cat, "list").output)
    applied = patchkit(cat, "apply", "myfix", "--root", f"serve={serve}")
    assert applied.exit_code == 2
    for output in (listed, flat(applied.output)):
        assert f"{manifest}:{line}:" in output and said in output, output
        assert "\\x00" not in output and "Unexpected character" not in output, output
