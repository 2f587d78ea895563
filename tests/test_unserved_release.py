"""An applied version of a fix on a release no version in the catalog serves: the sample tree
runs 0.5.21 with index-k-bytes v2 applied, and the catalog now holds v4 for 0.5.23 only (or v4
and a v3 variant for 0.5.22). Status called that `outdated ...: v4 is 0.5.21's variant`, which
apply and sync refuse; it says no version serves 0.5.21, which ones there are, and how to make
one, and an intact v2 is no failure of `status --exit-code` (docs/cli.md, status)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.errors import PreconditionFailed
from patchkit.targets import LocalTarget
from tests.test_status import catalog, roots  # noqa: F401  (fixtures)
from tests.test_remote import PY

FIX, POOL = "index-k-bytes", "python/sglang/srt/pool.py"
PATCH = "0001-count-index-k-bytes.patch"


def _catalog_moves_on(catalog: Catalog, variant: str | None = None) -> Catalog:
    """index-k-bytes becomes v4 for 0.5.23; ``variant``: with v3 kept for that release."""
    root = Path(catalog.root)
    manifest = root / "manifests" / f"{FIX}.toml"
    text = manifest.read_text().replace("version = 2\ntitle", "version = 4\ntitle").replace(
        'base_release = "0.5.21"\nreleases = ["0.5.20", "0.5.21"]',
        'base_release = "0.5.23"\nreleases = ["0.5.23"]')
    for version, release in ((3, "0.5.22"), (4, "0.5.23")):
        text += (f'\n[[changelog]]\nversion = {version}\ndate = "2026-0{version}-01"\n'
                 f'base_release = "{release}"\nsummary = "Rebased on {release}."\n')
    if variant is not None:
        (root / "patches" / FIX / variant).mkdir()
        shutil.copy(root / "patches" / FIX / PATCH, root / "patches" / FIX / variant / PATCH)
        text += (f'\n[[variants]]\nversion = 3\nbase_release = "{variant}"\n\n'
                 f'[[variants.patches]]\nfile = "{PATCH}"\nroot = "sglang"\n')
    manifest.write_text(text)
    return Catalog(root)


def _applied_v2(roots: dict[str, str], catalog: Catalog) -> LocalTarget:
    target = LocalTarget(roots, PY, "local")
    api.apply(catalog, target, [FIX])
    return target


def _row(catalog: Catalog, roots: dict[str, str], *args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog.root),
                           "status", *args, "--target", roots["sglang"], "--root",
                           f"serve={roots['serve']}"], capture_output=True, text=True)
    return done.returncode, next(r for r in done.stdout.splitlines() if r.startswith(FIX))


@pytest.mark.parametrize("variant, served", [
    (None, "v4 is for 0.5.23"),
    ("0.5.22", "v4 for 0.5.23, v3 for 0.5.22"),
])
def test_status_says_no_version_serves_the_release_not_that_it_is_its_variant(
        roots: dict[str, str], catalog: Catalog, variant: str | None, served: str) -> None:
    target = _applied_v2(roots, catalog)
    moved = _catalog_moves_on(catalog, variant)
    [seen] = [s for s in api.status(moved, target).status if s.name == FIX]
    assert (seen.state, seen.version, seen.catalog_version) == ("applied", 2, 4)
    assert seen.detail is not None
    assert f"no version of the fix serves 0.5.21 ({served})" in seen.detail
    assert f"patchkit rebase {FIX} --onto 0.5.21" in seen.detail
    code, row = _row(moved, roots, "--exit-code")
    assert "0.5.21's variant" not in row and "outdated" not in row, row
    assert f"no version of the fix serves 0.5.21 ({served})" in row, row
    assert code == 0  # v2 is applied and intact: not a failure of the target
    pool = Path(roots["sglang"], POOL)
    pool.write_text(pool.read_text() + "# edited by hand\n")
    [seen] = [s for s in api.status(moved, target).status if s.name == FIX]
    assert seen.state == "drifted"
    assert _row(moved, roots, "--exit-code")[0] == 1  # drift still fails it


def test_a_version_that_serves_the_release_is_still_outdated_and_its_variant(
        roots: dict[str, str], catalog: Catalog) -> None:
    target = _applied_v2(roots, catalog)
    moved = _catalog_moves_on(catalog, "0.5.21")  # v3 is 0.5.21's variant now
    [seen] = [s for s in api.status(moved, target).status if s.name == FIX]
    assert (seen.state, seen.version, seen.catalog_version) == ("outdated", 2, 3)
    code, row = _row(moved, roots, "--exit-code")
    assert "outdated (v2 applied, v3 in the catalog): v3 is 0.5.21's variant" in row, row
    assert code == 1


def test_apply_and_sync_refuse_the_upgrade_saying_how_to_make_a_version(
        roots: dict[str, str], catalog: Catalog) -> None:
    target = _applied_v2(roots, catalog)
    moved = _catalog_moves_on(catalog)
    before = Path(roots["sglang"], POOL).read_bytes()
    for run in (lambda: api.apply(moved, target, [FIX]), lambda: api.sync(moved, target)):
        with pytest.raises(PreconditionFailed) as refused:
            run()
        said = str(refused.value)
        assert f"patchkit rebase {FIX} --onto 0.5.21" in said, said
        assert "the applied v2 stays" in said, said
    assert Path(roots["sglang"], POOL).read_bytes() == before


def test_the_applied_version_itself_not_serving_the_release_is_said_too(
        roots: dict[str, str], catalog: Catalog) -> None:
    """The catalog's version is the applied one, and the tree now says another release (its
    version file moved on, the fix's files did not): the same words as when the catalog moved,
    not a plain `applied`."""
    target = _applied_v2(roots, catalog)
    version = Path(roots["sglang"], "python/sglang/version.py")
    version.write_text(version.read_text().replace("0.5.21", "0.5.22"))
    [seen] = [s for s in api.status(catalog, target).status if s.name == FIX]
    assert (seen.state, seen.version, seen.catalog_version) == ("applied", 2, 2)
    assert seen.detail is not None and "no version of the fix serves 0.5.22" in seen.detail
    assert f"patchkit rebase {FIX} --onto 0.5.22" in seen.detail
