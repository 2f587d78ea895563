"""Verify of a fix the target records as applied whose manifest has left the catalog: it is
still applied there, and its record holds the hashes of the files it wrote, so verify checks
those (its manifest's own checks cannot run, and it says so) instead of skipping it ("nothing
to verify") or calling it an unknown fix, as status and rollback answer it from its record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api, errors
from patchkit.catalog import Catalog
from patchkit.targets import LocalTarget
from tests.test_status import catalog, roots  # noqa: F401  (fixtures)
from tests.test_remote import PY

POOL = "python/sglang/srt/pool.py"


def _applied_then_gone(roots: dict[str, str], catalog: Catalog) -> tuple[LocalTarget, Catalog]:
    """pool-guard (and index-k-bytes, its dependency) applied, then pool-guard's manifest
    deleted from the catalog: index-k-bytes is still listed, pool-guard only recorded."""
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    (Path(catalog.root) / "manifests" / "pool-guard.toml").unlink()
    return target, Catalog(catalog.root)


def test_verify_checks_a_recorded_fix_whose_manifest_is_gone(roots: dict[str, str],
                                                             catalog: Catalog) -> None:
    target, fresh = _applied_then_gone(roots, catalog)
    result = api.verify(fresh, target)
    assert result.ok
    by_name = {f.name: f for f in result.fixes}
    assert set(by_name) == {"index-k-bytes", "pool-guard"}  # not only the listed one
    gone = by_name["pool-guard"]
    assert gone.outcome == "verified" and gone.version == 1
    assert gone.detail and "manifest is gone" in gone.detail
    assert "verification checks were not run" in gone.detail
    assert [c.kind for c in gone.verification] == ["drift"]  # its record's check, passed
    assert all(c.ok for c in gone.verification)
    # the listed fix still runs its manifest's own checks
    assert {c.kind for c in by_name["index-k-bytes"].verification} >= {"python-syntax", "python-script"}


def test_a_drifted_fix_whose_manifest_is_gone_fails_verify(roots: dict[str, str],
                                                           catalog: Catalog) -> None:
    target, fresh = _applied_then_gone(roots, catalog)
    serve = Path(roots["serve"], "serve.sh")
    serve.write_text(serve.read_text() + "# edited by hand\n")
    for names in ([], ["pool-guard"]):  # every recorded fix, or the one named
        with pytest.raises(errors.DriftError) as caught:
            api.verify(fresh, target, names)
        assert "serve:serve.sh" in str(caught.value)
        assert "manifest is gone" in str(caught.value)
        failed = {f.name: f.outcome for f in caught.value.result.fixes}  # type: ignore[attr-defined]
        assert failed["pool-guard"] == "failed"


def test_a_name_neither_listed_nor_recorded_is_still_unknown(roots: dict[str, str],
                                                             catalog: Catalog) -> None:
    target, fresh = _applied_then_gone(roots, catalog)
    with pytest.raises(errors.UnknownFixError):
        api.verify(fresh, target, ["no-such-fix"])
    with pytest.raises(errors.UnknownFixError):  # pool-guard is known here, the other is not
        api.verify(fresh, target, ["pool-guard", "no-such-fix"])


def _patchkit(catalog: Catalog, roots: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog.root), *args,
                           "--target", roots["sglang"], "--root", f"serve={roots['serve']}"],
                          capture_output=True, text=True)


def test_cli_verify_names_the_fix_checked_from_its_record_and_its_drifted_file(
        roots: dict[str, str], catalog: Catalog) -> None:
    _target, fresh = _applied_then_gone(roots, catalog)
    clean = _patchkit(fresh, roots, "verify")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "nothing to verify" not in clean.stderr
    assert "verified pool-guard v1" in clean.stdout
    assert "manifest is gone" in clean.stdout
    named = _patchkit(fresh, roots, "verify", "pool-guard")
    assert named.returncode == 0, named.stdout + named.stderr
    assert "verified pool-guard v1" in named.stdout
    serve = Path(roots["serve"], "serve.sh")
    serve.write_text(serve.read_text() + "# edited by hand\n")
    for args in (("verify",), ("verify", "pool-guard")):
        drifted = _patchkit(fresh, roots, *args)
        assert drifted.returncode == 1, (args, drifted.stdout, drifted.stderr)
        assert "serve:serve.sh" in drifted.stderr, drifted.stderr
    status = _patchkit(fresh, roots, "status", "--exit-code")
    assert status.returncode == 1  # the two gates agree


def test_verify_of_an_older_applied_version_checks_it_not_the_catalog_s_newer_one(
        roots: dict[str, str], catalog: Catalog) -> None:
    """pool-guard v1 applied, then the catalog's pool-guard became v2 (a refresh that changed
    serve.sh, and its sha256 check with it). verify ran v2's checks against v1's files and
    failed a host whose v1 was intact; the catalog holds no v1, so its files are checked
    against its record, v2's checks are not run, and the detail says how to upgrade."""
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, ["pool-guard"], with_deps=True)
    manifest = Path(catalog.root) / "manifests" / "pool-guard.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace("version = 1", "version = 2", 1).replace(
        "bb57bbd01b9c9512a2a167b5ac6b52aa6aa85782e86d0c89f5fa8cad41552a6e", "0" * 64))
    fresh = Catalog(catalog.root)
    for names in ([], ["pool-guard"]):
        result = api.verify(fresh, target, names)
        old = {f.name: f for f in result.fixes}["pool-guard"]
        assert old.outcome == "verified" and old.version == 1, old
        assert [c.kind for c in old.verification] == ["drift"] and old.verification[0].ok
        assert old.detail and "v1" in old.detail and "v2" in old.detail, old.detail
        assert "patchkit apply pool-guard" in old.detail
    # an edit of v1's files is still found, and named as the older version's
    serve = Path(roots["serve"], "serve.sh")
    serve.write_text(serve.read_text() + "# edited by hand\n")
    with pytest.raises(errors.DriftError) as caught:
        api.verify(fresh, target, ["pool-guard"])
    assert "serve:serve.sh" in str(caught.value)
