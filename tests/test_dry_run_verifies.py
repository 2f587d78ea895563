"""A dry run answers for the verification a real apply would run: the checks that only read a
file (grep, sha256, python-syntax) are asked of the files as the apply would write them.

A trial rebased a fix onto 0.5.23 (a conflict resolved by hand keeping upstream's line); the
new version's grep verification no longer held there. `apply --dry-run`, the fleet's
preflight and `matrix` (a dry run on each release) all said it applies; only the real apply,
after writing, failed and put the files back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_authoring import flat, git, new_catalog, patchkit, small_checkout  # noqa: F401

X = "python/sglang/a.py"


def _fix_with_checks(catalog: Path, src: Path, checks: str) -> None:
    (src / X).write_text((src / X).read_text().replace("two = 2", "two = 22"))
    made = patchkit(catalog, "new", "twos", "--from", str(src), "--no-commit")
    assert made.exit_code == 0, made.output
    git(src, "checkout", "-q", "--", ".")
    manifest = catalog / "manifests" / "twos.toml"
    manifest.write_text(manifest.read_text() + checks)


def _snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*"))
            if p.is_file() and ".git" not in p.parts}


GREP = '\n[[verification]]\nkind = "grep"\nroot = "sglang"\npath = "%s"\npattern = "%s"\ncount = 1\n'


def test_a_dry_run_fails_as_the_apply_would_on_a_grep_verification_it_breaks(
        tmp_path: Path, new_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    _fix_with_checks(new_catalog, src, GREP % (X, "two = 23"))
    before = _snapshot(src)
    dry = patchkit(new_catalog, "apply", "twos", "--target", str(src), "--dry-run", "--json")
    assert dry.exit_code == 1, dry.output
    said = json.loads(dry.stdout)
    assert said["error"]["type"] == "VerificationFailed", said
    assert "would fail" in said["error"]["message"] and "nothing was written" in said["error"]["message"]
    assert "two = 23" in said["error"]["message"]
    assert _snapshot(src) == before
    real = patchkit(new_catalog, "apply", "twos", "--target", str(src))
    assert real.exit_code == 1  # the same verdict, as before: written, failed, put back
    assert _snapshot(src) == before


@pytest.mark.parametrize("kind", ["grep", "python-syntax"])
def test_a_dry_run_shows_the_verification_that_holds_on_the_files_it_would_write(
        tmp_path: Path, new_catalog: Path, kind: str) -> None:
    src = small_checkout(tmp_path)
    check = (GREP % (X, "two = 22") if kind == "grep"
             else '\n[[verification]]\nkind = "python-syntax"\nroot = "sglang"\npath = "%s"\n' % X)
    _fix_with_checks(new_catalog, src, check)
    dry = patchkit(new_catalog, "apply", "twos", "--target", str(src), "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    fix = json.loads(dry.stdout)["fixes"][0]
    assert fix["outcome"] == "would-apply"
    assert [(c["kind"], c["ok"]) for c in fix["verification"]] == [(kind, True)], fix
    assert (src / X).read_text() == "one = 1\ntwo = 2\nthree = 3\n"  # nothing written
